"""The upstreams' record of what they did, shared by every process that serves them.

Two JSONL files side by side, each line flushed and fsynced before the caller answers:

- the **ledger** (``PATH``): one line per effect APPLIED — what tests count to prove
  "exactly once";
- the **calls journal** (``PATH.calls.jsonl``): one line per call received, whatever
  came of it (``read``, ``started``, ``applied``, ``replayed``, ``transient``,
  ``rejected``, ``conflict``) — what tests read to see that a call reached the upstream,
  with which idempotency key, and to wait until a slow call is in flight.

Several processes may serve the same upstream at once (a stdio upstream is a child of
every draftgate process that uses it), so the deduplication and the flaky counters live
in these files, under an exclusive ``flock`` on ``PATH.lock``, not in memory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


class KeyReused(Exception):
    """The same idempotency key came back with different arguments (as a payment provider
    refuses it: the key names one request, not one slot)."""


@dataclass(frozen=True)
class Applied:
    result: dict[str, Any]
    replayed: bool


def arguments_sha256(arguments: dict[str, Any]) -> str:
    # The upstreams import nothing of draftgate: they stand for systems nobody here wrote.
    encoded = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()


def calls_path(ledger: Path) -> Path:
    return ledger.with_name(ledger.name + ".calls.jsonl")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.calls_path = calls_path(path)
        self._lock_path = path.with_name(path.name + ".lock")
        path.parent.mkdir(parents=True, exist_ok=True)

    # --- what tests read ------------------------------------------------------------------

    def effects(self, scope: str | None = None) -> list[dict[str, Any]]:
        """Every applied effect (of one tool/endpoint when ``scope`` is given), in order."""
        return [e for e in read_jsonl(self.path) if scope is None or e["scope"] == scope]

    def calls(self, scope: str | None = None) -> list[dict[str, Any]]:
        return [c for c in read_jsonl(self.calls_path) if scope is None or c["scope"] == scope]

    # --- what the servers write -------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def record_call(self, scope: str, key: str | None, outcome: str, **extra: Any) -> None:
        with self.locked():
            self._append(self.calls_path, self._line(scope, key, outcome=outcome, **extra))

    def count_calls(self, scope: str, key: str | None, outcome: str) -> int:
        with self.locked():
            return sum(
                1
                for call in read_jsonl(self.calls_path)
                if (call["scope"], call["key"], call["outcome"]) == (scope, key, outcome)
            )

    def replay(self, scope: str, key: str | None, arguments: dict[str, Any]) -> Applied | None:
        """The first result for this key, if an effect was already applied under it."""
        if key is None:
            return None
        with self.locked():
            return self._replay_locked(scope, key, arguments)

    def apply(
        self,
        scope: str,
        key: str | None,
        arguments: dict[str, Any],
        make_result: Callable[[list[dict[str, Any]]], dict[str, Any]],
        **extra: Any,
    ) -> Applied:
        """Apply an effect once per (scope, key): a replay returns the first result and
        applies nothing. ``make_result`` sees the effects so far (to number new objects).
        A call without a key always applies — what a careless client gets."""
        with self.locked():
            if key is not None:
                earlier = self._replay_locked(scope, key, arguments)
                if earlier is not None:
                    return earlier
            effects = read_jsonl(self.path)
            result = make_result(effects)
            line = self._line(
                scope,
                key,
                seq=len(effects) + 1,
                arguments=arguments,
                arguments_sha256=arguments_sha256(arguments),
                result=result,
                **extra,
            )
            self._append(self.path, line)
            return Applied(result, replayed=False)

    def _replay_locked(self, scope: str, key: str, arguments: dict[str, Any]) -> Applied | None:
        for effect in read_jsonl(self.path):
            if effect["scope"] == scope and effect["key"] == key:
                if effect["arguments_sha256"] != arguments_sha256(arguments):
                    raise KeyReused(key)
                return Applied(effect["result"], replayed=True)
        return None

    @staticmethod
    def _line(scope: str, key: str | None, **fields: Any) -> dict[str, Any]:
        return {
            "scope": scope,
            "key": key,
            "pid": os.getpid(),
            "at": datetime.now(UTC).isoformat(),
            **fields,
        }

    @staticmethod
    def _append(path: Path, line: dict[str, Any]) -> None:
        # Flushed and fsynced before the caller answers: a SIGKILL right after the answer
        # (or the host going down) must not lose an effect the client was told about.
        with path.open("a", encoding="utf-8") as sink:
            sink.write(json.dumps(line, sort_keys=True) + "\n")
            sink.flush()
            os.fsync(sink.fileno())
