"""zmesh one-way throughput between two processes, for comparing two trees.

    PYTHONPATH=<tree> python bench/pair_throughput.py N [profile-prefix]

Spawns a sink and a source process (like ``python -m bench``'s zmesh
throughput), sends N messages and prints msg/s plus each side's CPU time and
context switches; with a profile prefix, writes cProfile stats for both.
The sink's handler runs inline where the tree has ``inline=``;
``TP_ASYNC=1`` makes it an ``async def`` handler that never awaits, the
kind agent builders write first; ``TP_QOS=1`` sends at QoS 1 (acknowledged).
It uses only API every zmesh version since 7bf4ab1 has (``inline=`` when
present), so the same script measures an old tree against a new one.
Interleave rounds (old, new, old, new, ...) and compare medians: e.g.
the QoS 0 regression check of the reliability issue used 5 rounds of
N = 200,000 against a clean 7bf4ab1 worktree.
"""
import asyncio, os, sys, time, subprocess, json, cProfile, inspect, importlib.util
os.environ["ZMESH_INTERFACES"] = "127.0.0.1"
# The envelope of this checkout, by its path: PYTHONPATH holds the tree under test,
# which need not have a bench/ (or may have an older one).
_spec = importlib.util.spec_from_file_location("_bench_envelope", os.path.join(os.path.dirname(os.path.abspath(__file__)), "envelope.py"))
_envelope = importlib.util.module_from_spec(_spec); _spec.loader.exec_module(_envelope)
encode, decode = _envelope.encode, _envelope.decode

KW = {"interfaces": "local", "discovery": False}

def inline_kw(fn):
    import zmesh
    return {"inline": True} if "inline" in inspect.signature(zmesh.Agent.add_handler).parameters else {}

async def sink(n, mesh):
    import zmesh
    count = 0
    done = asyncio.Event()
    t = {}
    def on_msg(msg):
        nonlocal count
        kind = decode(msg.payload)["type"]
        if kind == "data":
            count += 1
            if count == 1: t["first"] = time.monotonic()
            if count == n:
                t["last"] = time.monotonic(); done.set()
    async def on_msg_async(msg):
        on_msg(msg)
    async with zmesh.Node(mesh, name="sink-0", **KW) as node:
        a = node.agent("sink-0")
        if os.environ.get("TP_ASYNC"):
            a.add_handler("bench", on_msg_async)
        else:
            a.add_handler("bench", on_msg, **inline_kw(on_msg))
        emit("sink", {"endpoint": node.endpoint})
        await asyncio.wait_for(done.wait(), 120)
        emit("sink", t)
        print(json.dumps({k: v for k, v in node.stats().items() if v}), file=open(os.environ.get("TP_STATS","/dev/null"),"a"), flush=True)

async def source(n, mesh, endpoint):
    import zmesh
    async with zmesh.Node(mesh, name="source", seeds=[endpoint], **KW) as node:
        src = node.agent("src")
        await node.wait_for_agents("sink-0", timeout=10)
        for i in range(2000):
            await src.send("sink-0", "bench", encode(i, "warmup"))
            if i % 1000 == 0: await asyncio.sleep(0)
        await asyncio.sleep(0.3)
        qos = int(os.environ.get("TP_QOS", "0"))
        t0 = time.monotonic()
        for i in range(n):
            await src.send("sink-0", "bench", encode(i, "data"), qos=qos)
            if i % 1000 == 999: await asyncio.sleep(0)
        emit("src", {"t0": t0, "t_sent": time.monotonic()})
        await asyncio.sleep(3)
        print(json.dumps({k: v for k, v in node.stats().items() if v}), file=open(os.environ.get("TP_STATS","/dev/null"),"a"), flush=True)

def emit(tag, d):
    with open(os.environ["TP_DIR"] + "/" + tag, "a") as f:
        f.write(json.dumps(d) + "\n")

def wait_line(tag, k):
    path = os.environ["TP_DIR"] + "/" + tag
    while True:
        try:
            lines = open(path).read().splitlines()
            if len(lines) >= k: return json.loads(lines[k - 1])
        except FileNotFoundError: pass
        time.sleep(0.01)

def run(coro, prof):
    if prof:
        p = cProfile.Profile(); p.enable()
        try: asyncio.run(coro)
        finally:
            p.disable(); p.dump_stats(prof)
    else:
        asyncio.run(coro)

if __name__ == "__main__":
    role = sys.argv[1]
    if role == "sink":
        run(sink(int(sys.argv[2]), sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
    elif role == "source":
        run(source(int(sys.argv[2]), sys.argv[3], sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else None)
    else:
        n = int(sys.argv[1]); prof = sys.argv[2] if len(sys.argv) > 2 else None
        mesh = "tp-%d" % os.getpid()
        import tempfile; os.environ["TP_DIR"] = tempfile.mkdtemp()
        wrap = lambda tag: (os.environ["TP_WRAP"].replace("TAG", tag).split() if os.environ.get("TP_WRAP") else [])
        sk = subprocess.Popen(wrap("sink") + [sys.executable, __file__, "sink", str(n), mesh] + ([prof + ".sink"] if prof else []),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ep = wait_line("sink", 1)["endpoint"]
        so = subprocess.Popen(wrap("src") + [sys.executable, __file__, "source", str(n), mesh, ep] + ([prof + ".src"] if prof else []),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t = wait_line("sink", 2)
        s = wait_line("src", 1)
        _, _, ru_so = os.wait4(so.pid, 0); _, _, ru_sk = os.wait4(sk.pid, 0)
        print("msg/s %.0f  (send-side %.0f)  cpu src %.2fu+%.2fs ctxsw %d/%d  sink %.2fu+%.2fs ctxsw %d/%d" % (n / (t["last"] - s["t0"]), n / (s["t_sent"] - s["t0"]),
              ru_so.ru_utime, ru_so.ru_stime, ru_so.ru_nvcsw, ru_so.ru_nivcsw, ru_sk.ru_utime, ru_sk.ru_stime, ru_sk.ru_nvcsw, ru_sk.ru_nivcsw))
