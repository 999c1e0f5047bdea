"""Grading free-form math answers with math-verify, safely.

:func:`grade_math` takes the model's final answer (the last ``\\boxed{}``, else GSM8K's
``#### N``, else the last number) and compares it with the reference. Plain integers are
compared directly; everything else goes to math-verify (``parse`` and ``verify``), which runs in
a separate worker process: sympy can be driven into computations that no signal interrupts
(huge powers, factorials), so the worker is killed when an answer takes longer than
``timeout_s`` and a fresh one is started for the next answer. No model output can hang, crash or
slow down the caller beyond its timeout. Concurrent calls (threads of a rollout, an evaluation)
go to a pool of such workers (:data:`POOL_SIZE`), so a slow answer delays only its own call.

The bound is per call once a worker has it. With more concurrent calls than workers, a call
first waits for a worker, first come first served: since every call ends within its timeout,
one with ``n`` calls ahead of it waits at most ``ceil(n / POOL_SIZE) * timeout_s``, and returns
at most ``(ceil(n / POOL_SIZE) + 1) * timeout_s`` after it was made (11 calls on 8 workers,
one of them slow: 2 x 5 s at most). No call is ever graded wrong for waiting: an answer is
never scored by the load. ``python scripts/grader_bench.py`` measures the waits.
Extraction of the final answer is one linear pass over the response.

Run as ``python -m creditbench.harness.tasks.grading`` this module is that worker.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from typing import Any

from creditbench.harness.tasks.base import Grade

MAX_ANSWER_CHARS = 500
_STARTUP_TIMEOUT_S = 120.0
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOX_BARE = re.compile(r"\\boxed +([^\s$]+)")
_HASHES = re.compile(r"####\s*([^\n]*)")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_PLAIN_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_INTEGER = re.compile(r"-?\d{1,30}")


class Unbalanced(str):
    """What :func:`last_boxed` returns for a last ``\\boxed{`` that never closes: a final
    answer was begun and not finished, which grades as no answer, never as an earlier box or
    the last number in the text."""


UNBALANCED = Unbalanced()


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces matched; escaped
    braces ``\\{ \\}`` do not count. ``\\boxed 5`` (no braces) also works. A last box that
    never closes gives :data:`UNBALANCED`. One pass over the text from the last box: linear in
    its length, whatever the model wrote."""
    last = None
    for last in _BOX.finditer(text):  # noqa: B007  (the last match is the one wanted)
        pass
    if last is not None:
        depth, i = 1, last.end()
        while i < len(text):
            char = text[i]
            if char == "\\":
                i += 2
                continue
            depth += {"{": 1, "}": -1}.get(char, 0)
            if depth == 0:
                return text[last.end() : i]
            i += 1
        return UNBALANCED
    bare = list(_BOX_BARE.finditer(text))
    return bare[-1].group(1) if bare else None


def extract_answer(response: str) -> str | None:
    """The final answer of a response: the last ``\\boxed{}``, else ``#### N``, else the last
    number; None when there is none."""
    boxed = last_boxed(response)
    if boxed is UNBALANCED:
        return None
    if boxed is not None:
        return boxed.strip()
    hashes = _HASHES.findall(response)
    if hashes and hashes[-1].strip():
        return hashes[-1].strip()
    numbers = _NUMBER.findall(response)
    return numbers[-1].rstrip(",") if numbers else None


def normalize_number(text: str) -> str:
    """``"1,234"`` -> ``"1234"``; anything that is not a plain number is returned stripped."""
    text = text.strip().strip("$").strip()
    return text.replace(",", "") if _PLAIN_NUMBER.fullmatch(text) else text


def grade_math(
    response: str, reference: str, *, timeout_s: float = 5.0, max_chars: int = 20000
) -> Grade:
    """1.0 when the response's final answer equals ``reference`` mathematically. Never raises on
    model output; empty, garbage, enormous and slow answers score 0 with a reason."""
    if not isinstance(response, str) or not response.strip():
        return Grade(0.0, "empty")
    if len(response) > max_chars:
        return Grade(0.0, "too long")
    answer = extract_answer(response)
    if answer is None or not answer:
        return Grade(0.0, "no answer")
    if len(answer) > MAX_ANSWER_CHARS:
        return Grade(0.0, "answer too long")
    answer, gold = normalize_number(answer), normalize_number(reference)
    if answer == gold:
        return Grade(1.0, "correct")
    if _INTEGER.fullmatch(answer) and _INTEGER.fullmatch(gold):
        return Grade(1.0, "correct") if int(answer) == int(gold) else Grade(0.0, "wrong answer")
    return _VERIFIER.verify(gold, answer, timeout_s)


class _Verifier:
    """A math-verify worker process, restarted after a timeout or a crash."""

    def __init__(self, command: list[str] | None = None) -> None:
        self._command = command or [sys.executable, "-m", __name__]
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner = os.getpid()  # a forked child must not talk to its parent's worker
        self._lines: queue.Queue[str | None] = queue.Queue()

    def _start(self) -> None:
        if self._command[-1] == __name__ and importlib.util.find_spec("math_verify") is None:
            raise ImportError("math-verify is not installed: pip install math-verify")
        self._lines = queue.Queue()
        self._proc = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        lines, stdout = self._lines, self._proc.stdout
        threading.Thread(target=_pump, args=(stdout, lines), daemon=True).start()
        if self._receive(_STARTUP_TIMEOUT_S) != {"ready": True}:
            self.stop()
            raise RuntimeError("the math-verify worker did not start")

    def _receive(self, timeout: float) -> Any:
        """The worker's next reply, ``"timeout"`` or ``"crashed"`` (its output ended)."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return "timeout"
        if line is None:
            return "crashed"
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return "crashed"

    def stop(self) -> None:
        if self._proc is not None and self._owner == os.getpid():
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def verify(self, gold: str, answer: str, timeout_s: float) -> Grade:
        with self._lock:
            if self._owner != os.getpid():
                self._proc, self._owner = None, os.getpid()
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            assert self._proc is not None and self._proc.stdin is not None
            # math-verify's own (signal) timeouts fire first when they can; the kill is the backstop
            request = {"gold": gold, "answer": answer, "timeout": max(1, int(0.8 * timeout_s))}
            try:
                self._proc.stdin.write(json.dumps(request) + "\n")
                self._proc.stdin.flush()
            except OSError:
                self.stop()
                return Grade(0.0, "grader crashed")
            reply = self._receive(timeout_s)
            if reply in ("timeout", "crashed"):
                self.stop()
                return Grade(0.0, "timeout" if reply == "timeout" else "grader crashed")
            if reply.get("timeout"):
                return Grade(0.0, "timeout")
            if reply.get("error"):
                return Grade(0.0, f"unparsable answer ({reply['error']})")
            return Grade(1.0, "correct") if reply["equal"] else Grade(0.0, "wrong answer")


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


class _Pool:
    """Up to ``size`` math-verify workers, started as calls need them: concurrent gradings go
    to different workers, so one slow answer (killed at its timeout) delays no other."""

    def __init__(self, size: int, make=_Verifier) -> None:
        self.size, self._make = size, make
        self._idle: queue.LifoQueue[_Verifier] = queue.LifoQueue()  # warm workers first
        self._made, self._lock = 0, threading.Lock()
        self._all: list[_Verifier] = []

    def _take(self) -> _Verifier:
        """A worker: an idle one, a new one while fewer than ``size`` exist, else the first to
        come back (each comes back within its call's timeout: the wait is bounded)."""
        with self._lock:
            if self._idle.empty() and self._made < self.size:
                self._made += 1
                worker = self._make()
                self._all.append(worker)
                return worker
        return self._idle.get()

    def verify(self, gold: str, answer: str, timeout_s: float) -> Grade:
        worker = self._take()
        try:
            return worker.verify(gold, answer, timeout_s)
        finally:
            self._idle.put(worker)

    def stop(self) -> None:
        for worker in self._all:
            worker.stop()


# Wall-clock timeouts end slow answers whatever the load, so a pool wider than the cores still
# bounds each call; sympy workers weigh ~150 MB each.
POOL_SIZE = min(16, max(8, os.cpu_count() or 1))
_VERIFIER = _Pool(POOL_SIZE)
atexit.register(_VERIFIER.stop)


def _worker() -> None:
    """Answer ``{"gold", "answer", "timeout"}`` requests, one JSON line each."""
    import logging

    from math_verify import parse, verify

    logging.disable(logging.CRITICAL)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies may reach the pipe
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, Any] = {"equal": False, "error": None}
        started = time.monotonic()
        try:
            gold = parse("\\boxed{" + request["gold"] + "}", parsing_timeout=request["timeout"])
            answer = parse("\\boxed{" + request["answer"] + "}", parsing_timeout=request["timeout"])
            if not answer:
                reply["error"] = "no parse"
            else:
                reply["equal"] = bool(verify(gold, answer, timeout_seconds=request["timeout"]))
        except BaseException as error:  # a worker reports bad input, it never dies of it
            reply["error"] = type(error).__name__
        # math-verify's own timeouts answer "not equal"; one that ran its full time is a timeout
        if not reply["equal"] and time.monotonic() - started >= 0.95 * request["timeout"]:
            reply["timeout"] = True
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    _worker()
