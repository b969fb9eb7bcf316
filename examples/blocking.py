"""The blocking facade, for scripts and REPLs. Run: python examples/blocking.py"""

import zmesh.sync as zs

with zs.Node("blocking", transport="inproc") as node:
    planner = node.agent("planner")
    writer = node.agent("writer")
    editor = node.agent("editor")

    @editor.on("review")
    def review(msg):
        return f"reviewed {msg.payload!r} (asked by {msg.sender})"

    @writer.on("draft")
    def draft(msg):
        # a blocking call inside a handler is fine: handlers run in a thread pool
        return writer.delegate("editor", msg, topic="review", timeout=5).payload

    print(planner.request("writer", "draft", "chapter 1", timeout=5).payload)
