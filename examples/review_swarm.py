"""A review swarm whose agents call a model through the OpenAI SDK: ask
every reviewer and keep the first two answers (the slow one is stopped, and
so is its model's stream), route summaries to whichever summarizer is free,
and let a late joiner read the current plan.

    pip install openai && python examples/review_swarm.py

The model is a fake OpenAI-compatible server on 127.0.0.1 (below): it
streams its answer a word at a time, slowly for the model "slow-model", and
says how many words it sent before a client hung up.
"""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

import zmesh

HUNG_UP: list[int] = []  # words sent by the fake model to clients that went away


class FakeModel(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        words = [f"{body['model']}", "says:"] + prompt.split() + ["looks", "fine"] * 20
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        sent = 0
        try:
            for word in words:
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                sent += 1
                threading.Event().wait(0.05 if body["model"] == "slow-model" else 0.001)
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            HUNG_UP.append(sent)


def reviewer(node: zmesh.Node, name: str, model: str, client: openai.AsyncOpenAI) -> None:
    agent = node.agent(name, capabilities=("review",), meta={"model": model})

    @agent.on("draft.review")
    async def review(msg: zmesh.Message) -> str:
        # Cancelled with its requester (a gather that has enough, a timeout): the SDK's stream closes with it.
        stream = await client.chat.completions.create(
            model=model, stream=True, messages=[{"role": "user", "content": msg.payload}])
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]).strip()


async def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="not-needed")
    try:
        async with zmesh.Node("reviews", transport="inproc") as node:
            for name, model in (("ada", "fast-model"), ("bob", "fast-model"), ("cy", "slow-model")):
                reviewer(node, name, model, client)
            planner = node.agent("planner")
            print("reviewers:", {a: dict(i.meta) for a, i in sorted(node.registry.agents().items()) if i.meta})

            answers = await planner.gather("review", "draft.review", "the intro", timeout=20, want=2)
            print("first two reviews from:", sorted(a.sender for a in answers))
            while not HUNG_UP:
                await asyncio.sleep(0.01)
            print(f"the slow reviewer was stopped: its model sent {HUNG_UP[0]} of 44 words")

            try:
                await planner.request("cy", "draft.review", "the outro", timeout=0.3)
            except zmesh.Timeout:
                while len(HUNG_UP) < 2:
                    await asyncio.sleep(0.01)
                print(f"a request that timed out stopped its model too ({HUNG_UP[1]} words)")

            summarizers = [node.agent(f"sum{i}", capabilities=("summarize",)) for i in (1, 2)]
            for s in summarizers:
                s.add_handler("summarize", lambda msg, s=s: f"{s.id}: {msg.payload[:12]}...")
            routed = await asyncio.gather(*(
                planner.request_any("summarize", "summarize", f"chapter {i} text", timeout=5) for i in range(4)))
            print("summaries by:", sorted({r.sender for r in routed}))
            try:
                await planner.request_any("translate", "translate", "hola")
            except zmesh.NoProvider as exc:
                print("no translator:", exc)

            await planner.broadcast("plan.current", {"step": 3, "todo": "polish"}, retain=True)
            late = node.agent("late-joiner")
            plan: list[object] = []
            await late.subscribe("plan.*", lambda msg: plan.append(msg.payload), inline=True)
            print("the late joiner read the plan at once:", plan[0])
    finally:
        await client.close()
        server.shutdown()
        server.server_close()


asyncio.run(main())
