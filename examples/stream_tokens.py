"""Token streaming across agent hops: a UI streams an answer from a planner,
which races two workers' models, relays the first to speak token by token
and cancels the other; then the UI stops reading half way, and the worker's
model stops with it.

    pip install openai && python examples/stream_tokens.py

Three nodes over ZeroMQ on 127.0.0.1. The model is a fake OpenAI-compatible
server on 127.0.0.1 (below): it streams a word at a time, after a long
think for "slow-model", and says how many words it sent to a client that
hung up.
"""

import asyncio
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

import zmesh

os.environ.setdefault("ZMESH_INTERFACES", "127.0.0.1")  # this example's mDNS stays on this host
HUNG_UP: list[tuple[str, int]] = []  # (model, words sent) for each client that went away
CANCELLED: list[str] = []  # workers whose generator saw its reader cancel
WORDS = 40


class FakeModel(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        words = [f"word{i}" for i in range(WORDS)]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        sent = 0
        try:
            threading.Event().wait(1.0 if body["model"] == "slow-model" else 0.0)
            for word in words:
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                sent += 1
                threading.Event().wait(0.01)
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            HUNG_UP.append((body["model"], sent))


def worker(node: zmesh.Node, name: str, model: str, client: openai.AsyncOpenAI) -> None:
    agent = node.agent(name, capabilities=("generate",))

    @agent.on("generate")
    async def generate(msg: zmesh.Message):  # an async def generator: each yield is a chunk
        try:
            async with await client.chat.completions.create(
                    model=model, stream=True, messages=[{"role": "user", "content": msg.payload}]) as stream:
                async for chunk in stream:  # cancelled with the stream's reader: the model's stream closes
                    if chunk.choices and chunk.choices[0].delta.content:
                        yield chunk.choices[0].delta.content
        except asyncio.CancelledError:
            CANCELLED.append(name)
            raise


def planner(node: zmesh.Node) -> None:
    me = node.agent("planner")

    @me.on("answer")
    async def answer(msg: zmesh.Message):
        racing = {name: me.stream(name, "generate", msg.payload, timeout=30) for name in ("fast", "slow")}
        firsts = {asyncio.ensure_future(s.__anext__()): name for name, s in racing.items()}
        done, pending = await asyncio.wait(firsts, return_when=asyncio.FIRST_COMPLETED)
        first = done.pop()
        winner = firsts[first]
        for task in pending:
            task.cancel()
        for name, stream in racing.items():
            if name != winner:
                await stream.aclose()  # the other worker is stopped, and its model with it
        yield f"[{winner}] "
        yield first.result()
        async for token in racing[winner]:  # relayed as it comes, a window at a time
            yield token


async def wait_until(condition, what: str) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(what)


async def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="not-needed")
    mesh = f"tokens-{os.getpid()}"
    try:
        async with zmesh.Node(mesh, discovery=False) as ui_node, \
                zmesh.Node(mesh, seeds=[ui_node.endpoint], discovery=False) as planner_node, \
                zmesh.Node(mesh, seeds=[ui_node.endpoint], discovery=False) as worker_node:
            worker(worker_node, "fast", "fast-model", client)
            worker(worker_node, "slow", "slow-model", client)
            planner(planner_node)
            ui = ui_node.agent("ui")
            await ui_node.wait_for_agents("planner", "fast", "slow", timeout=20)
            await planner_node.wait_for_agents("fast", "slow", "ui", timeout=20)

            tokens = [token async for token in ui.stream("planner", "answer", "tell me a story", timeout=30)]
            print(f"the answer came in {len(tokens)} chunks, from {tokens[0].strip()}: {''.join(tokens[1:4])}...")
            await wait_until(lambda: any(m == "slow-model" for m, _ in HUNG_UP), "the slow model to be stopped")
            print("cancelled:", CANCELLED, "and its model's stream was closed")

            CANCELLED.clear()
            async with ui.stream("planner", "answer", "another story", timeout=30) as stream:
                async for token in stream:
                    if stream.received == 6:
                        break  # enough: leaving the block cancels the stream, hop by hop
            await wait_until(lambda: any(m == "fast-model" for m, _ in HUNG_UP), "the fast model to be stopped")
            sent = [n for m, n in HUNG_UP if m == "fast-model"][0]
            print(f"the UI stopped after 6 chunks; cancelled: {CANCELLED}; the fast model stopped early:",
                  sent < WORDS)
    finally:
        await client.close()
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    asyncio.run(main())
