"""A stand-in for GenericAgent's ``agentmain.py`` (lsdefine/GenericAgent at
6d2cf09) that speaks its sub-agent file protocol exactly, with a scripted
model instead of an LLM. What it writes, reads and deletes, and when, is
GenericAgent's (see ../shared/ga-file-protocol.md); only the text of a round
comes from the script below, chosen by the round's input:

    die          writes part of the round, then exits (code 3) without the marker
    raise        the backend fails: the error in a code fence, then the marker
    hang         never ends the round (until killed)
    slow N       N pieces, $GA_STANDIN_DELAY s apart (default 0.02), a turn
                 end every 10 (where _keyinfo and _intervene are consumed)
    history      the inputs of every round so far (one conversation)
    crlf TEXT    TEXT's lines, written with \\r\\n (as on Windows)
    length       the length of the input
    anything     "echo: " + the input

$GA_STANDIN_POLL and $GA_STANDIN_POLLS replace the 2 s between looks for
reply.txt and the 300 looks (GenericAgent's), so a test need not wait ten
minutes for a sub-agent to end.
"""

import argparse
import glob
import os
import subprocess
import sys
import time

script_dir = os.path.dirname(os.path.abspath(__file__))
ROUND_END = "\n\n[ROUND END]\n"


def consume_file(dr, file):  # ga.py's, as written
    if dr and os.path.exists(os.path.join(dr, file)):
        with open(os.path.join(dr, file), encoding="utf-8", errors="replace") as f:
            content = f.read()
        os.remove(os.path.join(dr, file))
        return content


class Round:
    def __init__(self, d, outfile, newline=None):
        self.d, self.outfile, self.newline = d, outfile, newline
        self.full, self.last_pos, self.stopped, self.turn = "", 0, False, 1

    def write(self, text):
        with open(self.outfile, "w", encoding="utf-8", newline=self.newline) as f:
            f.write(text)

    def piece(self, chunk):
        if consume_file(self.d, "_stop"):  # agentmain.py:179, between pieces
            self.stopped = True
            return False
        self.full += chunk
        if len(self.full) - self.last_pos > 30:
            self.write(self.full)
            self.last_pos = len(self.full)
        return True

    def turn_end(self, final):
        keyinfo = consume_file(self.d, "_keyinfo")  # ga.py:594-595, at every turn end
        intervene = consume_file(self.d, "_intervene")
        if final:
            return  # the round is over: what they said is lost, as in GenericAgent
        if keyinfo:
            self.full += f"\n[MASTER keyinfo] {keyinfo}\n"
        if intervene:
            self.full += f"\n[MASTER] {intervene}\n"
        self.turn += 1


def run_round(d, outfile, raw, inputs):
    words = raw.split()
    head = words[0] if words else ""
    rnd = Round(d, outfile, newline="\r\n" if head == "crlf" else None)
    delay = float(os.environ.get("GA_STANDIN_DELAY", "0.02"))
    if head == "die":
        rnd.piece("a part of an answer that never ends, longer than thirty characters")
        rnd.write(rnd.full)
        os._exit(3)
    if head == "hang":
        rnd.piece("thinking for ever, and saying so in more than thirty characters")
        while True:
            time.sleep(1)
    if head == "raise":
        rnd.full = "started\n```\nException: the backend failed\n```"
    elif head == "slow":
        for i in range(int(words[1])):
            if not rnd.piece(f"part{i} "):
                break
            time.sleep(delay)
            if i % 10 == 9:
                rnd.turn_end(final=False)
        rnd.turn_end(final=True)
    elif head == "history":
        rnd.piece(" | ".join(inputs))
    elif head == "crlf":
        rnd.piece(raw[len("crlf "):])
    elif head == "length":
        rnd.piece(f"length {len(raw)}")
    else:
        for i in range(0, len(f"echo: {raw}"), 7):
            rnd.piece(f"echo: {raw}"[i:i + 7])
        rnd.turn_end(final=True)
    rnd.write(rnd.full + ROUND_END)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--task")
    parser.add_argument("--func")
    parser.add_argument("--input")
    parser.add_argument("--llm_no", type=int, default=0)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--nobg", action="store_true")
    args, _unknown = parser.parse_known_args()
    if (args.func or args.task) and not args.nobg:  # agentmain.py:221-232
        cmd = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--nobg"]
        if args.task:
            d = os.path.join(script_dir, f"temp/{args.task}")
            os.makedirs(d, exist_ok=True)
            out = open(os.path.join(d, "stdout.log"), "w", encoding="utf-8")
            err = open(os.path.join(d, "stderr.log"), "w", encoding="utf-8")
        else:
            out, err = subprocess.DEVNULL, subprocess.DEVNULL
        p = subprocess.Popen(cmd, cwd=script_dir, stdout=out, stderr=err)
        print("PID:", p.pid)
        sys.exit(0)
    d = os.path.join(script_dir, f"temp/{args.task}")
    nround = ""
    infile = os.path.join(d, "input.txt")
    outfile = f"{d}/output{nround}.txt"
    if args.input:
        os.makedirs(d, exist_ok=True)
        [os.remove(f) for f in glob.glob(os.path.join(d, "output*.txt"))]
        with open(infile, "w", encoding="utf-8") as f:
            f.write(args.input)
    with open(infile, encoding="utf-8") as f:
        raw = f.read()
    poll = float(os.environ.get("GA_STANDIN_POLL", "2"))
    polls = int(os.environ.get("GA_STANDIN_POLLS", "300"))
    inputs = []
    while True:
        inputs.append(raw)
        run_round(d, outfile, raw, inputs)
        consume_file(d, "_stop")  # agentmain.py:264
        for _ in range(polls):
            time.sleep(poll)
            if raw := consume_file(d, "reply.txt"):
                break
        else:
            break
        nround = nround + 1 if isinstance(nround, int) else 1
        outfile = f"{d}/output{nround}.txt"
        print(f"round {nround}", flush=True)


if __name__ == "__main__":
    main()
