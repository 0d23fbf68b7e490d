#!/usr/bin/python3
"""Runs the README's shell blocks that are marked to run, in order, as a reader would.

A block is marked by an HTML comment on the line before its opening fence:

    <!-- run -->
    ```sh
    ...
    ```

The quick start, long-running and benchmark blocks are not marked. The marked blocks run one
after another in one bash (`set -e`: a command that fails fails the run), from a scratch
directory where `build` is the build tree under test, so `build/src/cli/drover` and
`$PWD/build/...` mean what they mean in a checkout. Two things are substituted, nothing else:

  - every fixed port (a number after "host:", or after dig's "-p ") gets a free port from
    10000-19999, the same one everywhere it appears, so that the run neither needs nor disturbs
    the standard ports, and nothing running beside it is given its ports meanwhile (see
    free_ports); a port written any other way (":7070" alone, "--port 7070") is not found, so
    the README writes addresses as host:port;
  - data directories under /tmp/ and /var/lib/ move into a temp dir.

A command started in the background ("... &") is given until its addresses accept connections
(at most 30 s), and one second more, before the next line runs: a reader types slower than a
script. At the end every
process the blocks started is stopped (SIGTERM, then SIGKILL) and the temp dir removed.

Usage: scripts/readme_blocks.py --build BUILD_DIR [--readme README.md] [--list]
Inside the blocks `curl` fails on an HTTP error (--fail-with-body), as any failing command
does. Exit code 0 when every marked block ran; 1 when one failed (its README line is printed) or
the run was stopped; 2 for bad usage or a README with no marked block.
"""

import argparse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r"^<!--\s*run\s*-->\s*$")
FENCE_OPEN = re.compile(r"^```(sh|bash)\s*$")
# A port is a number after "host:" (an address, not a JSON value such as "ttl_ms":10000) or after
# dig's "-p ".
PORT = re.compile(r"(?<=[\w\]}]:)(\d{4,5})\b|(?<=-p )(\d{4,5})\b")
ADDRESS = re.compile(r"((?:127\.\d+\.\d+\.\d+|\$\w+|\$\{\w+\}|localhost)):(\d{2,5})\b")
DATA_DIR = re.compile(r"(?<![\w.])/(tmp|var/lib)/")


class Usage(Exception):
    """What makes the run impossible before it starts: exit code 2."""


def marked_blocks(readme_path):
    """[(line number of the fence, [lines])] of the marked sh blocks."""
    blocks = []
    with open(readme_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        if MARK.match(lines[i]) and i + 1 < len(lines) and FENCE_OPEN.match(lines[i + 1]):
            start = i + 1
            body = []
            j = start + 1
            while j < len(lines) and lines[j].strip() != "```":
                body.append(lines[j])
                j += 1
            if j == len(lines):
                raise Usage(f"README line {start + 1}: a marked block never closes")
            blocks.append((start + 1, body))
            i = j
        elif MARK.match(lines[i]):
            raise Usage(f"README line {i + 1}: <!-- run --> is not followed by a ```sh block")
        i += 1
    return blocks


def free_ports(count):
    """Ports free now on every address, from 10000-19999: below the ephemeral range (no port-0
    bind of a test running beside this one is given them) and below 20000, where `drover agent`
    picks its instances' ports -- so nothing else is handed them in the minutes between choosing
    and using them."""
    candidates = list(range(10000, 20000))
    random.shuffle(candidates)
    chosen = []
    for port in candidates:
        if len(chosen) == count:
            break
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("0.0.0.0", port))
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("0.0.0.0", port))
            chosen.append(port)
        except OSError:
            continue
    if len(chosen) < count:
        raise Usage(f"only {len(chosen)} of {count} ports are free in 10000-19999")
    return chosen


def port_map(blocks):
    wanted = set()
    for _, body in blocks:
        for line in body:
            for m in PORT.finditer(line):
                wanted.add(m.group(1) or m.group(2))
    ordered = sorted(wanted)
    return dict(zip(ordered, (str(p) for p in free_ports(len(ordered)))))


def substitute(line, ports, data_root):
    line = PORT.sub(lambda m: ports[m.group(1) or m.group(2)], line)
    return DATA_DIR.sub(lambda m: f"{data_root}/{m.group(1).replace('/', '-')}/", line)


def script_for(blocks, ports, data_root):
    out = [
        "set -e",
        # Waits until every host:port accepts a connection (at most 30 s in all).
        "__wait_ports() {",
        "  local deadline=$((SECONDS + 30)) a",
        "  for a in \"$@\"; do",
        "    until (exec 3<>\"/dev/tcp/${a%:*}/${a##*:}\") 2>/dev/null; do",
        "      if ((SECONDS >= deadline)); then echo \"readme: nothing listens on $a\" >&2; return 1; fi",
        "      sleep 0.1",
        "    done",
        "  done",
        "}",
        "trap 'echo \"readme: failed: $BASH_COMMAND\" >&2' ERR",
        # A request the server refuses fails the run, as any other failing command does.
        "curl() { command curl --fail-with-body \"$@\"; }",
    ]
    for fence_line, body in blocks:
        out.append(f"echo '### README block at line {fence_line}'")
        out.append(f"__block={fence_line}")
        for raw in body:
            line = substitute(raw, ports, data_root)
            out.append(line)
            code = line.split(" #")[0].rstrip()
            if code.endswith("&") and not code.endswith("&&"):
                addresses = [f"{m.group(1)}:{m.group(2)}" for m in ADDRESS.finditer(code)]
                if addresses:
                    out.append("__wait_ports " + " ".join(f'"{a}"' for a in addresses))
                out.append("sleep 1")  # and a moment to register, as between typed lines
    out.append("echo '### every marked README block ran'")
    return "\n".join(out) + "\n"


def stop_group(process):
    """SIGTERM to the blocks' process group, then SIGKILL after 20 s."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True, help="the build tree the blocks call as build/")
    parser.add_argument("--readme", default=os.path.join(os.path.dirname(__file__), "..",
                                                         "README.md"))
    parser.add_argument("--list", action="store_true", help="print the script, run nothing")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds for the whole run (below CTest's 900)")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    if not os.path.isfile(os.path.join(build, "src", "cli", "drover")):
        print(f"readme: {build} is not a build tree (no src/cli/drover)", file=sys.stderr)
        return 2
    try:
        blocks = marked_blocks(args.readme)
        if not blocks:
            raise Usage(f"{args.readme} has no block marked <!-- run -->")
        ports = port_map(blocks)
    except Usage as e:
        print(f"readme: {e}", file=sys.stderr)
        return 2

    scratch = tempfile.mkdtemp(prefix="drover-readme-")
    process = None

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        os.symlink(build, os.path.join(scratch, "build"))
        data_root = os.path.join(scratch, "data")
        os.mkdir(data_root)
        script = script_for(blocks, ports, data_root)
        if args.list:
            print(script)
            return 0
        print("readme: ports " + ", ".join(f"{k}->{v}" for k, v in ports.items()), flush=True)
        print(f"readme: {len(blocks)} marked block(s) at README lines "
              + ", ".join(str(b[0]) for b in blocks), flush=True)
        env = dict(os.environ, NO_COLOR="1")
        process = subprocess.Popen(["/bin/bash", "-c", script], cwd=scratch, env=env,
                                   start_new_session=True)
        try:
            code = process.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"readme: the blocks did not finish within {args.timeout:.0f} s",
                  file=sys.stderr)
            code = -1
        if code != 0:
            print(f"readme: FAILED (exit {code}); the last '### README block at line N' above "
                  "is the block that failed", file=sys.stderr)
            return 1
        return 0
    except KeyboardInterrupt as e:
        print(f"readme: stopped ({e or 'SIGINT'})", file=sys.stderr)
        return 1
    finally:
        # Whatever happened, nothing the blocks started outlives the run.
        if process is not None:
            stop_group(process)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
