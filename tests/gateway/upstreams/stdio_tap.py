"""A recording tap on a stdio MCP server: relays every byte both ways unchanged and appends
each message the client sent to a JSONL log.

    python tests/gateway/upstreams/stdio_tap.py --log PATH -- COMMAND [ARGS...]

A third-party server (npm's memory server) cannot be asked how often it was called, and it
answers a repeated write as if nothing happened; the tap is how a test counts the
``tools/call`` requests that reached it and reads the ``_meta`` they carried — without
touching the protocol (stdio MCP is newline-delimited JSON-RPC, relayed line by line).
Several taps (one per draftgate process) may append to one log: each line is written with
one ``write`` under an exclusive ``flock``.

Standard library only: it starts in milliseconds, in front of every stdio child.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO


def record(log: Path, line: bytes) -> None:
    try:
        message = json.loads(line)
    except ValueError:
        return  # not ours to judge: relayed anyway, the server will answer it
    entry = json.dumps({"pid": os.getpid(), "message": message}, sort_keys=True) + "\n"
    with log.open("a", encoding="utf-8") as sink:
        fcntl.flock(sink, fcntl.LOCK_EX)
        sink.write(entry)
        sink.flush()
        os.fsync(sink.fileno())


def pump_out(source: IO[bytes], sink: IO[bytes]) -> None:
    for line in iter(source.readline, b""):
        sink.write(line)
        sink.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is required after --")
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None
    assert child.stdout is not None
    relay = threading.Thread(target=pump_out, args=(child.stdout, sys.stdout.buffer), daemon=True)
    relay.start()
    try:
        for line in iter(sys.stdin.buffer.readline, b""):
            record(args.log, line)
            child.stdin.write(line)
            child.stdin.flush()
    except BrokenPipeError:
        pass  # the server went away; its exit status says why
    finally:
        with contextlib.suppress(BrokenPipeError):
            child.stdin.close()
    code = child.wait()
    relay.join(timeout=5)
    return code


if __name__ == "__main__":
    sys.exit(main())
