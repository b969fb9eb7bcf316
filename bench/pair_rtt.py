"""zmesh request round trip between two processes, for comparing two trees.

    PYTHONPATH=<tree> python bench/pair_rtt.py N        # prints p50 and p99 in microseconds

The echo handler runs inline where the tree has ``inline=`` (as the bench
does); ``RTT_ASYNC=1`` makes it an ``async def`` handler instead. Uses only
API every zmesh version since 7bf4ab1 has, so an old tree can be measured
against a new one: interleave rounds and compare medians.
"""
import asyncio, os, sys, time, subprocess, json, tempfile, statistics
os.environ["ZMESH_INTERFACES"] = "127.0.0.1"
KW = {"interfaces": "local", "discovery": False}
async def server(mesh, path):
    import zmesh
    async with zmesh.Node(mesh, name="srv", **KW) as node:
        a = node.agent("echo")
        import inspect
        kw = {"inline": True} if "inline" in inspect.signature(zmesh.Agent.add_handler).parameters else {}
        async def h(m): return m.payload
        a.add_handler("e", h if os.environ.get("RTT_ASYNC") else (lambda m: m.payload), **({} if os.environ.get("RTT_ASYNC") else kw))
        open(path, "w").write(node.endpoint)
        await asyncio.sleep(120)
async def client(mesh, ep, n):
    import zmesh
    async with zmesh.Node(mesh, name="cli", seeds=[ep], **KW) as node:
        c = node.agent("cli")
        await node.wait_for_agents("echo", timeout=10)
        for _ in range(300): await c.request("echo", "e", {"x": 1}, timeout=5)
        ts = []
        for _ in range(n):
            t = time.perf_counter(); await c.request("echo", "e", {"x": 1}, timeout=5); ts.append(time.perf_counter() - t)
        ts.sort(); print("%.1f %.1f" % (ts[len(ts)//2]*1e6, ts[int(len(ts)*0.99)]*1e6))
if __name__ == "__main__":
    if sys.argv[1] == "server": asyncio.run(server(sys.argv[2], sys.argv[3]))
    else:
        n = int(sys.argv[1]); mesh = "rtt%d" % os.getpid(); path = tempfile.mktemp()
        sv = subprocess.Popen([sys.executable, __file__, "server", mesh, path])
        try:
            while not os.path.exists(path) or not open(path).read(): time.sleep(0.01)
            asyncio.run(client(mesh, open(path).read(), n))
        finally: sv.kill(); sv.wait()
