"""The Gomocup brain's search process: its JAX half, so that the protocol half never waits.

`python -m az_jax.gomocup` reads the manager's commands in a process that never imports
JAX. When it loads a model it starts this module as a child process and calls the
`agent.Agent` there through `RemoteAgent`: the same methods, over a pipe. Why:

- importing JAX and reading compiled programs from the cache happen inside calls that hold
  the interpreter lock for up to ~0.2 s; in one process a move asked meanwhile (50 ms
  turns) was answered late, although it only needed the one-ply tactical check;
- a search call that does not come back by the move's deadline (`RemoteAgent.deadline`:
  the machine stalled, a compile in the other thread held the lock) is given up: the child
  skips it if it has not started, a late reply is dropped, and the brain answers from
  what it has, on time.

Positions cross the pipe as tuples of moves (the child keeps their env states), root masks
as numbers naming the child's copy, search results as lists of floats: the brain's process
never imports numpy either (~13 MB less of the memory a manager counts). Requests and
replies are pickles with a 4-byte length; the child runs `compile_search` and
`time_search` in a second thread, so that the brain's deep search compiles beside its
moves, as it did in one process. The child exits when the pipe closes (the brain ended or
was killed).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
import types
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
_HEADER = struct.Struct(">I")
# Run in the child's second thread: these take seconds and must not hold up searches.
_BACKGROUND = ("compile_search", "time_search")
_CANCEL = "cancel"  # a request given up by the brain: skipped if it has not started


def _send(stream, lock, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    with lock:
        stream.write(_HEADER.pack(len(data)) + data)
        stream.flush()


def _receive(stream):
    """The next message, or None at the end of the stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


class WorkerError(RuntimeError):
    """The search process failed a call (its traceback is on the brain's stderr) or died."""


class Thought:
    """What the brain reads of a search's result (`agent.Thought`'s fields it uses)."""

    def __init__(self, action: int, value: float, simulations: int):
        self.action, self.value, self.simulations = int(action), float(value), int(simulations)

    @property
    def win_rate(self) -> float:
        return min(1.0, max(0.0, (self.value + 1.0) / 2.0))


class RemoteAgent:
    """An `agent.Agent` for the Gomocup brain, living in a child process.

    Positions are tuples of actions (`new_game()` is `()`); the methods are the ones
    `gomocup.Brain` calls. A call made while `deadline` (a `time.perf_counter()` value) is
    set gives up at that time with `TimeoutError`.

    Args:
      model: a `gomocup.Model`; size, rule: the board; seed: of the search keys.
      started: called with this agent once its process exists, before the model loads
        (so that a brain can `kill` a load it no longer wants).
    Raises:
      WorkerError: the model failed to load (the reason in the message).
    """

    def __init__(self, model, size: int, rule: str, seed: int = 0, started=None):
        # stderr: this process's fd 2 (on Windows a child would otherwise inherit the
        # console's handle, not the pipe `gomocup.stderr_as_debug_lines` put there).
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "az_jax.gomocup_worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=2, env=os.environ.copy())
        self._write_lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._ids = itertools.count()
        self._closed = False
        threading.Thread(target=self._read_replies, daemon=True).start()
        self.deadline: float | None = None
        self.mask_seconds: float | None = None
        self._compiled: set[tuple[int, bool]] = set()  # (sims, evaluation) compiled there
        self._tactics = None
        if started is not None:  # the process exists: the caller may `kill` it from now on
            started(self)
        try:  # its fields, not the object: the brain's module may be __main__ here
            self._call("load", dataclasses.asdict(model), size, rule, seed)
        except BaseException:
            self.close()  # no search process left behind by a model that failed to load
            raise

    # ------------------------------------------------------------------ the pipe
    def _read_replies(self) -> None:
        stream = self._proc.stdout
        while True:
            try:
                reply = _receive(stream)
            except (OSError, ValueError, pickle.UnpicklingError):
                reply = None
            if reply is None:
                break
            call_id, ok, value = reply
            future = self._pending.pop(call_id, None)
            if future is None:  # given up: its deadline passed
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(WorkerError(value))
        self._closed = True
        for future in list(self._pending.values()):
            if not future.done():
                future.set_exception(WorkerError("the search process ended"))
        self._pending.clear()

    def _call(self, method: str, *args, timed: bool = False):
        if self._closed:
            raise WorkerError("the search process ended")
        if timed and self.deadline is not None and time.perf_counter() >= self.deadline:
            raise TimeoutError(f"{method} passed the move's deadline")  # not even sent
        call_id, future = next(self._ids), Future()
        self._pending[call_id] = future
        try:
            _send(self._proc.stdin, self._write_lock, (call_id, method, args))
        except (OSError, ValueError) as e:
            self._pending.pop(call_id, None)
            raise WorkerError(f"the search process ended ({e})") from None
        timeout = None
        if timed and self.deadline is not None:
            timeout = max(0.0, self.deadline - time.perf_counter())
        try:
            return future.result(timeout)
        except FutureTimeout:
            self._pending.pop(call_id, None)
            try:  # not started yet: the child skips it (no stale work ahead of later calls)
                _send(self._proc.stdin, self._write_lock, (call_id, _CANCEL, ()))
            except (OSError, ValueError):
                pass
            raise TimeoutError(f"{method} passed the move's deadline") from None

    @property
    def ended(self) -> bool:
        """Whether the child process has gone (closed, killed, crashed)."""
        return self._closed or self._proc.poll() is not None

    def kill(self) -> None:
        """Ends the child process at once (one still loading: its load fails)."""
        self._closed = True
        self._proc.kill()

    def close(self) -> None:
        """Ends the child process (it exits when its pipe closes)."""
        self._closed = True
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()

    # ------------------------------------------------------------------ Agent's methods
    @property
    def tactics(self):
        return self._tactics

    @tactics.setter
    def tactics(self, value) -> None:
        self._call("set_tactics", value)
        self._tactics = value

    @staticmethod
    def new_game() -> tuple:
        return ()

    @staticmethod
    def play(state: tuple, action: int) -> tuple:
        return (*state, int(action))

    def root_mask(self, state):
        invalid, self.mask_seconds = self._call("root_mask", state, timed=True)
        return invalid

    def plain_mask(self, state):
        return self._call("plain_mask", state, timed=True)

    def _run(self, state, sims: int, evaluation: bool, invalid=None):
        return self._call("run", state, int(sims), bool(evaluation), invalid, timed=True)

    def compile_search(self, state, sims: int, evaluation: bool) -> None:
        self._call("compile_search", state, int(sims), bool(evaluation))
        self._compiled.add((int(sims), bool(evaluation)))

    def time_search(self, state, sims: int, evaluation: bool) -> None:
        self._call("time_search", state, int(sims), bool(evaluation))

    def warmup(self, num_simulations: int | None = None) -> float:
        return self._call("warmup", num_simulations)

    def think(self, state, num_simulations: int) -> Thought:
        action, value, sims = self._call("think", state, int(num_simulations))
        return Thought(action, value, sims)

    def _thought(self, action, root_value, visits, q, weights, sims, t0) -> Thought:
        del weights, t0
        chosen = float(q[action])
        return Thought(action, root_value if chosen != chosen else chosen, sims)


# ====================================================================== the child
def configure_jax() -> None:
    """Lean XLA (one thread, no thread pool) and the persistent compilation cache; call
    before JAX is imported."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = (flags + " " + XLA_FLAGS).strip()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from az_jax import parallel_setup

    if parallel_setup.use_compilation_cache(min_compile_seconds=0.0) is not None:
        import jax

        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# The brain's threat search looks for forced wins of at most this many moves, whatever the
# model's `search.threat_depth` (4 by default since stop 35): one more level adds ~45 MB
# to the brain's peak (401 -> 446 MB on 9x9 with no INFO max_memory), too close to
# gomocup.THREATS_MEMORY_MB under load, and costs ~3x a root, time the clock gives the
# deep search instead (README, Gomocup brain).
THREAT_DEPTH = 3


def load_agent(model, size: int, rule: str, seed: int = 0):
    """An Agent for `model` (a `gomocup.Model`: its `weights`, else its `workdir` and
    `step`) on a size x size board under `rule` (imports JAX), its threat search capped
    at THREAT_DEPTH."""
    configure_jax()
    import envs
    from az_jax import agent as agent_lib
    from az_jax import checkpoint as ckpt

    ckpt.quiet_logs()
    env = envs.make("gomoku", size=size, rule=rule)
    if model.weights is not None:
        restored = ckpt.load_weights(model.weights, play_env=env)
    else:
        restored = ckpt.restore(model.workdir, step=model.step, play_env=env)
    search = restored.config.search
    with search.unlocked():
        search.threat_depth = min(int(search.get("threat_depth", THREAT_DEPTH)), THREAT_DEPTH)
    return agent_lib.Agent(restored, seed=seed)


def _remember(cache: dict, key, value, size: int = 8) -> None:
    """Stores `value` under `key`, dropping the oldest entries beyond `size`."""
    cache[key] = value
    while len(cache) > size:
        cache.pop(next(iter(cache)))


class _Worker:
    """The child's side: one Agent, the env states of the positions it was asked about."""

    def __init__(self):
        self.agent = None
        self._states: dict[tuple, object] = {}
        self._masks: dict[int, object] = {}  # the root masks of the last few moves
        self._mask_ids = itertools.count()
        self._lock = threading.Lock()

    def state(self, moves: tuple):
        """The env state after `moves` (stepping on from the longest known prefix)."""
        with self._lock:
            if moves in self._states:
                return self._states[moves]
            start = max((k for k in self._states if moves[:len(k)] == k), key=len,
                        default=())
            state = self._states[start] if start in self._states else self.agent.new_game()
            for a in moves[len(start):]:
                state = self.agent.play(state, a)
            _remember(self._states, moves, state)
            return state

    def load(self, fields, size, rule, seed):
        self.agent = load_agent(types.SimpleNamespace(**fields), size, rule, seed)
        self.state((0,))  # compiles the step now, not in the first move with a stone

    def set_tactics(self, value):
        self.agent.tactics = value

    def _keep(self, mask) -> int:
        """A number that names `mask` (kept here) in the brain's later `run` calls."""
        with self._lock:
            key = next(self._mask_ids)
            _remember(self._masks, key, mask)
            return key

    def root_mask(self, moves):
        return self._keep(self.agent.root_mask(self.state(moves))), self.agent.mask_seconds

    def plain_mask(self, moves):
        return self._keep(self.agent.plain_mask(self.state(moves)))

    def run(self, moves, sims, evaluation, mask):
        invalid = None if mask is None else self._masks.get(mask)  # (None: computed anew)
        action, value, visits, q, weights = self.agent._run(self.state(moves), sims,
                                                            evaluation, invalid)
        return action, value, visits.tolist(), q.tolist(), weights.tolist()

    def compile_search(self, moves, sims, evaluation):
        self.agent.compile_search(self.state(moves), sims, evaluation)

    def time_search(self, moves, sims, evaluation):
        self.agent.time_search(self.state(moves), sims, evaluation)

    def warmup(self, sims):
        return float(self.agent.warmup(sims))

    def think(self, moves, sims):
        t = self.agent.think(self.state(moves), sims)
        return int(t.action), float(t.value), int(t.simulations)


def serve(requests, replies, worker=None) -> None:
    """The child's loop: requests from `requests` until it ends, replies to `replies`
    (`worker`: the object whose methods the requests call; default a `_Worker`)."""
    import queue
    import traceback

    worker, lock = worker or _Worker(), threading.Lock()
    queues = {"main": queue.Queue(), "background": queue.Queue()}
    # Calls queued and not started; a cancel marks only those (one for a call already
    # started or answered is dropped, so neither set outgrows the queues).
    waiting: set[int] = set()
    cancelled: set[int] = set()
    guard = threading.Lock()

    def work(q):
        while True:
            call_id, method, args = q.get()
            with guard:
                waiting.discard(call_id)
                skip = call_id in cancelled
                cancelled.discard(call_id)
            if skip:
                continue
            try:
                result = (call_id, True, getattr(worker, method)(*args))
            except Exception as e:  # noqa: BLE001 - the brain decides; the cause on stderr
                traceback.print_exc(file=sys.stderr)
                result = (call_id, False, f"{type(e).__name__}: {e}")
            try:
                _send(replies, lock, result)
            except (OSError, ValueError):
                os._exit(0)  # the brain is gone

    for q in queues.values():
        threading.Thread(target=work, args=(q,), daemon=True).start()
    while True:
        message = _receive(requests)
        if message is None:
            return
        with guard:
            if message[1] == _CANCEL:
                if message[0] in waiting:
                    cancelled.add(message[0])
                continue
            waiting.add(message[0])
        queues["background" if message[1] in _BACKGROUND else "main"].put(message)


def main() -> None:
    # The pipe to the brain is this process's stdout; anything else that writes there (a
    # library's print, a C++ log line) goes to stderr instead.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        serve(sys.stdin.buffer, replies)
    except Exception:  # noqa: BLE001 - on the brain's stderr, then exit
        import traceback

        traceback.print_exc(file=sys.stderr)
    finally:
        sys.stderr.flush()
        os._exit(0)  # without waiting for a compile still running in a thread


if __name__ == "__main__":
    main()
