"""Run one function on R real processes joined by torch.distributed's gloo backend, from a notebook.

`run_on_ranks(fn, per_rank_args)` calls `fn(*per_rank_args[r])` on rank r of R processes that have
joined one gloo process group on 127.0.0.1, and returns what each rank returned. It works from a
Jupyter kernel (JupyterLab on Linux and macOS, Colab) and from a grader's kernel:

- the processes come from a `multiprocessing` forkserver that has imported torch once (spawn where
  there is no forkserver), and stay: a pool per world size lives as long as the kernel, each worker
  looping on its task queue, so a check's many cases reuse the same R processes;
- `fn` may be defined in the notebook (`__main__`): it travels by value, with cloudpickle;
- what a rank raises comes back with the lines of the learner's own code it went through;
- a rank that waits forever (a send with no matching receive) ends the task after `idle` seconds
  with no progress on any rank (gloo's own timeout behind it), with `Deadlock` naming the ranks
  still waiting and on what; the pool is then stopped and restarted at the next task. Nothing is
  ever left running: the pools stop when the kernel exits, and a worker whose kernel died exits.

Each worker records its calls of torch.distributed (`Event`): which ranks it sent to and received
from, the collectives it called, and a received buffer read before its request was waited on.

Introduced in 11_attention_at_scale.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import itertools
import multiprocessing
import os
import pickle
import queue
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

IDLE_SECONDS = 15.0
"""How long a task may go without any rank making progress before it is called a deadlock."""
GLOO_SECONDS = 20.0
"""gloo's own timeout on a send or receive: the safety net behind `IDLE_SECONDS`."""
START_SECONDS = 120.0
"""How long R fresh processes may take to join their process group (the first imports torch)."""

PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.utils.flop_counter",
    "torch._dynamo",  # what the flop counter imports on its first use: 0.9 s in each rank otherwise
    "cloudpickle",
    __name__,
    "attn_course.merging",
)
"""What the forkserver imports once, so that no rank imports it again (the flop counter measures rings)."""

_P2P = ("send", "recv", "isend", "irecv")
_COLLECTIVES = (
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "broadcast",
    "gather",
    "scatter",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "barrier",
)


@dataclass(frozen=True)
class Event:
    """One call of torch.distributed by one rank, in order."""

    kind: str
    """"send", "recv", "isend", "irecv", "wait" (on an isend's or irecv's request), a collective's name,
    or "read-pending" (a tensor read while an irecv into it had not been waited on)."""
    peer: int | None = None
    """The rank sent to or received from (None: any rank, or a collective)."""
    op: str = ""
    """For "wait" and "read-pending": the request's operation ("isend", "irecv")."""
    ended: bool = False
    """For a blocking call: whether it returned (False: the rank was still inside it)."""
    shape: tuple[int, ...] | None = None
    """For a send or receive: the shape of the tensor sent, or of the buffer received into."""


@dataclass(frozen=True)
class Raised:
    """What one rank raised: the exception's type and text, and its traceback's frames."""

    rank: int
    type_name: str
    message: str
    frames: tuple[tuple[str, int, str], ...]
    """(file name, line number, function name) of each frame, outermost first."""


@dataclass
class Outcome:
    """One task's result on every rank."""

    outputs: list[Any]
    """What each rank returned, by rank."""
    events: list[list[Event]] = field(default_factory=list)
    """Each rank's calls of torch.distributed, in order."""
    printed: list[str] = field(default_factory=list)
    """What each rank printed (its stdout and stderr)."""


class RanksFailed(Exception):
    """A task did not finish on every rank."""

    def __init__(self, message: str, case: int, events: list[list[Event]]) -> None:
        super().__init__(message)
        self.case = case
        """Which of the task's cases failed."""
        self.events = events
        """Each rank's calls of torch.distributed in that case, up to the failure."""


class RankRaised(RanksFailed):
    """The function raised on one or more ranks."""

    def __init__(
        self, message: str, case: int, events: list[list[Event]], raised: list[Raised], stranded: list[int]
    ) -> None:
        super().__init__(message, case, events)
        self.raised = raised
        """What each rank that raised raised, first reported first."""
        self.stranded = stranded
        """The ranks that neither raised nor returned in that case (left waiting, as a rule)."""


class Deadlock(RanksFailed):
    """Some ranks waited for `idle` seconds without any rank making progress."""

    def __init__(self, message: str, case: int, events: list[list[Event]], waiting: list[int]) -> None:
        super().__init__(message, case, events)
        self.waiting = waiting
        """The ranks that had not returned."""


# ---------------------------------------------------------------------------------------------
# In each worker: the torch.distributed calls recorded


class _Recorder:
    """A worker's record of its torch.distributed calls in the current case, sent to the kernel as made."""

    def __init__(self, results: Any, rank: int) -> None:
        self.results, self.rank = results, rank
        self.task, self.case = -1, -1
        self.pending: dict[int, tuple[str, int | None]] = {}  # irecv buffer's data_ptr -> (op, peer)
        self.requests: list[_Request] = []  # this case's requests, to finish those never waited on
        self.inside = False  # inside a recorded call of torch.distributed

    def start(self, task: int, case: int) -> None:
        self.task, self.case = task, case
        self.pending.clear()
        self.requests.clear()

    def finish(self) -> None:
        """Wait on the requests the function left behind, so that the next case starts clean."""
        for request in self.requests:
            if not request.waited:
                request.wait()

    def note(self, event: Event) -> None:
        self.results.put(("event", self.task, self.case, self.rank, event))


class _Request:
    """An isend's or irecv's request, recording its wait (and ending the irecv's pending buffer)."""

    def __init__(self, work: Any, recorder: _Recorder, op: str, peer: int | None, buffer: int) -> None:
        self._work, self._recorder, self._op, self._peer, self._buffer = work, recorder, op, peer, buffer
        self.waited = False
        recorder.requests.append(self)

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        self._recorder.note(Event("wait", self._peer, self._op))
        result = self._work.wait(*args, **kwargs)
        self.waited = True
        self._recorder.pending.pop(self._buffer, None)
        self._recorder.note(Event("wait", self._peer, self._op, ended=True))
        return result

    def is_completed(self) -> bool:
        done = bool(self._work.is_completed())
        if done:
            self.waited = True
            self._recorder.pending.pop(self._buffer, None)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _peer(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The rank a point-to-point call sends to or receives from (None: any)."""
    names = ("dst", "group_dst") if "send" in kind else ("src", "group_src")
    for name in names:
        if kwargs.get(name) is not None:
            return int(kwargs[name])
    return int(args[1]) if len(args) > 1 and args[1] is not None else None


def _recording(kind: str, real: Callable[..., Any], recorder: _Recorder) -> Callable[..., Any]:
    """`real` (a torch.distributed function) with its calls recorded."""

    def recorded(*args: Any, **kwargs: Any) -> Any:
        if recorder.inside:  # torch.distributed calling itself (send calls isend): one call, recorded once
            return real(*args, **kwargs)
        recorder.inside = True
        try:
            return record(*args, **kwargs)
        finally:
            recorder.inside = False

    def record(*args: Any, **kwargs: Any) -> Any:
        tensor = args[0] if args else kwargs.get("tensor")
        shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else None
        if kind in ("isend", "irecv"):
            peer = _peer(kind, args, kwargs)
            recorder.note(Event(kind, peer, shape=shape))
            work = real(*args, **kwargs)
            buffer = tensor.untyped_storage().data_ptr() if isinstance(tensor, torch.Tensor) else 0
            if kind == "irecv" and buffer:
                recorder.pending[buffer] = (kind, peer)
            return _Request(work, recorder, kind, peer, buffer) if work is not None else None
        peer, shape = (_peer(kind, args, kwargs), shape) if kind in _P2P else (None, None)
        recorder.note(Event(kind, peer, shape=shape))
        result = real(*args, **kwargs)
        recorder.note(Event(kind, peer, ended=True, shape=shape))
        return result

    recorded.__name__ = recorded.__qualname__ = kind
    setattr(recorded, "_attn_course_real", real)  # noqa: B010  (read by `_PendingReads`)
    recorded.__doc__ = real.__doc__
    return recorded


_BARRIER = dist.barrier
"""torch.distributed's own barrier, never recorded: the runtime's, between cases."""


def _install(recorder: _Recorder) -> None:
    """Record this worker's calls of torch.distributed (the module's and distributed_c10d's names)."""
    c10d = dist.distributed_c10d
    for kind in (*_P2P, *_COLLECTIVES):
        real = getattr(c10d, kind, None)
        if real is None:
            continue
        wrapped = _recording(kind, real, recorder)
        setattr(c10d, kind, wrapped)  # P2POp and batch_isend_irecv compare with these
        setattr(dist, kind, wrapped)


_METADATA = frozenset(
    (
        "__get__",
        "size",
        "dim",
        "numel",
        "__len__",
        "is_contiguous",
        "stride",
        "element_size",
        "untyped_storage",
        "new_empty",
        "new_zeros",
        "new_ones",
        "new_full",
        "empty_like",
        "zeros_like",
        "ones_like",
        "full_like",
        "rand_like",
        "randn_like",
    )
)
"""Calls that read a tensor's shape, dtype or layout, not its values: harmless on a pending buffer."""


class _PendingReads(TorchFunctionMode):
    """Record a tensor read while an irecv into its storage has not been waited on."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        real = getattr(func, "_attn_course_real", None)
        if real is not None:  # torch.distributed's own dispatch of a recorded call: recorded once already
            return real(*args, **kwargs)
        pending = self.recorder.pending
        if pending and getattr(func, "__name__", "") not in _METADATA:
            for value in itertools.chain(args, kwargs.values()):
                tensors = value if isinstance(value, list | tuple) else (value,)
                for tensor in tensors:
                    if isinstance(tensor, torch.Tensor) and not isinstance(tensor, torch.nn.Parameter):
                        found = pending.get(tensor.untyped_storage().data_ptr())
                        if found is not None:
                            self.recorder.note(Event("read-pending", found[1], found[0]))
                            pending.pop(tensor.untyped_storage().data_ptr(), None)  # said once
        return func(*args, **kwargs)


def _frames(error: BaseException) -> tuple[tuple[str, int, str], ...]:
    return tuple((f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(error.__traceback__))


def _worker(rank: int, world: int, port: int, tasks: Any, results: Any, kernel: int) -> None:
    """One rank: join the process group, then run tasks until told to stop or the kernel is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt in the notebook is the kernel's to handle
    torch.set_num_threads(1)
    loopback = {"linux": "lo", "darwin": "lo0"}.get(sys.platform)
    if loopback and "GLOO_SOCKET_IFNAME" not in os.environ:  # gloo on 127.0.0.1, whatever the hostname
        os.environ["GLOO_SOCKET_IFNAME"] = loopback
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=START_SECONDS))
        dist.init_process_group(
            "gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=GLOO_SECONDS)
        )
    except Exception as error:  # noqa: BLE001  (said to the kernel, which stops the pool)
        results.put(("fatal", rank, f"{type(error).__name__}: {error}"))
        return
    recorder = _Recorder(results, rank)
    _install(recorder)
    results.put(("ready", rank))
    while True:
        try:
            task = tasks.get(timeout=1.0)
        except queue.Empty:
            if not _alive(kernel):
                return
            continue
        if task is None:
            break
        _run_task(task, rank, results, recorder)
    dist.destroy_process_group()


def _run_task(task: tuple[int, bytes, bytes], rank: int, results: Any, recorder: _Recorder) -> None:
    """Run each case of one task on this rank; stop at the first that raises.

    The ranks meet at a barrier after each case, so that a rank that returned early cannot send the
    next case's blocks to a rank still receiving this case's.
    """
    task_id, function, cases = task
    recorder.start(task_id, 0)
    try:
        fn = cloudpickle.loads(function)
        all_args = pickle.loads(cases)
    except BaseException as error:  # noqa: BLE001  (reported; every rank fails alike)
        results.put(("raised", task_id, 0, rank, Raised(rank, type(error).__name__, str(error), ())))
        return
    for case, args in enumerate(all_args):
        recorder.start(task_id, case)
        printed = io.StringIO()  # shown in the notebook, not in the terminal the kernel started from
        try:
            with (
                _PendingReads(recorder),
                contextlib.redirect_stdout(printed),
                contextlib.redirect_stderr(printed),
            ):
                out = fn(*args)
            payload = pickle.dumps(out)
            recorder.finish()
        except BaseException as error:  # noqa: BLE001  (the learner's: sent to the kernel)
            raised = Raised(rank, type(error).__name__, str(error), _frames(error))
            results.put(("printed", task_id, case, rank, printed.getvalue()))
            results.put(("raised", task_id, case, rank, raised))
            return
        results.put(("printed", task_id, case, rank, printed.getvalue()))
        results.put(("done", task_id, case, rank, payload))
        if case + 1 < len(all_args):
            recorder.inside = True  # the runtime's own call: not the learner's
            _BARRIER()
            recorder.inside = False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------------------------
# In the kernel: the pools


def _context() -> Any:
    """A forkserver that has imported torch (each rank forks from it cheaply), or spawn where none."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))
        return context
    return multiprocessing.get_context("spawn")


class _Pool:
    """R worker processes in one gloo process group, and their queues."""

    _tasks = itertools.count()

    def __init__(self, world: int) -> None:
        context = _context()
        self.world = world
        # The rendezvous lives in the kernel, on a port the system picked: no race for a free port.
        self.store = dist.TCPStore(
            "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=START_SECONDS)
        )
        self.results = context.Queue()
        self.tasks = [context.Queue() for _ in range(world)]
        self.processes = [
            context.Process(
                target=_worker,
                args=(rank, world, self.store.port, self.tasks[rank], self.results, os.getpid()),
                daemon=True,
                name=f"attn-course rank {rank} of {world}",
            )
            for rank in range(world)
        ]
        for process in self.processes:
            process.start()
        ready: set[int] = set()
        deadline = time.monotonic() + START_SECONDS
        while len(ready) < world:
            try:
                message = self.results.get(timeout=0.5)
            except queue.Empty:
                if time.monotonic() > deadline or not all(p.is_alive() for p in self.processes):
                    self.stop()
                    raise RuntimeError(f"{world} processes could not join one gloo process group") from None
                continue
            if message[0] == "fatal":
                self.stop()
                raise RuntimeError(f"rank {message[1]} could not join the process group: {message[2]}")
            if message[0] == "ready":
                ready.add(message[1])

    def healthy(self) -> bool:
        return all(p.is_alive() for p in self.processes)

    def run(
        self, fn: Callable[..., Any], cases: Sequence[Sequence[tuple[Any, ...]]], idle: float
    ) -> list[Outcome]:
        """Each case's outputs on every rank; raises RanksFailed for the first case that fails."""
        task = next(self._tasks)
        function = cloudpickle.dumps(fn)
        for rank in range(self.world):
            self.tasks[rank].put((task, function, cloudpickle.dumps([case[rank] for case in cases])))
        outputs: list[list[Any]] = [[None] * self.world for _ in cases]
        events: list[list[list[Event]]] = [[[] for _ in range(self.world)] for _ in cases]
        printed: list[list[str]] = [[""] * self.world for _ in cases]
        done: list[set[int]] = [set() for _ in cases]
        raised: dict[int, list[Raised]] = {}
        last = time.monotonic()
        while sum(len(d) for d in done) < self.world * len(cases):
            failed = min(raised) if raised else None
            if failed is not None and len(done[failed]) + len(raised[failed]) == self.world:
                break  # every rank of the failing case has said how it ended
            wait = (0.5 if failed is not None else idle) - (time.monotonic() - last)
            try:
                message = self.results.get(timeout=max(wait, 0.01))
            except queue.Empty:
                dead = [r for r, p in enumerate(self.processes) if not p.is_alive()]
                if dead and failed is None:
                    case = next(i for i, d in enumerate(done) if len(d) < self.world)
                    codes = ", ".join(f"rank {r} (exit code {self.processes[r].exitcode})" for r in dead)
                    text = f"the process of {codes} ended while the others ran"
                    raise RanksFailed(text, case, events[case]) from None
                if time.monotonic() - last < (0.5 if failed is not None else idle):
                    continue
                if failed is not None:
                    break  # the other ranks wait for the one that raised: said as that rank's error
                case = next(i for i, d in enumerate(done) if len(d) < self.world)
                waiting = [r for r in range(self.world) if r not in done[case]]
                text = _deadlock_text(waiting, events[case], idle)
                raise Deadlock(text, case, events[case], waiting) from None
            kind, task_id = message[0], message[1]
            if task_id != task:
                continue  # a late message of an earlier task
            last = time.monotonic()
            case, rank = message[2], message[3]
            if kind == "event":
                events[case][rank].append(message[4])
            elif kind == "printed":
                printed[case][rank] = message[4]
            elif kind == "done":
                outputs[case][rank] = pickle.loads(message[4])
                done[case].add(rank)
            elif kind == "raised":
                raised.setdefault(case, []).append(message[4])
        if raised:
            case = min(raised)
            first = raised[case]
            who = ", ".join(str(r.rank) for r in first)
            text = (
                f"rank{'s' if len(first) > 1 else ''} {who} raised {first[0].type_name}: {first[0].message}"
            )
            stranded = [
                r for r in range(self.world) if r not in done[case] and all(x.rank != r for x in first)
            ]
            raise RankRaised(text, case, events[case], first, stranded)
        return [Outcome(outputs[i], events[i], printed[i]) for i in range(len(cases))]

    def stop(self) -> None:
        """Stop every worker (politely, then by force) and wait until each is gone."""
        for tasks in self.tasks:
            try:
                tasks.put(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 0.5
        for process in self.processes:
            if process.pid is None:
                continue
            process.join(max(deadline - time.monotonic(), 0.0))
            if process.is_alive():
                process.kill()
                process.join(5.0)
        for q in (*self.tasks, self.results):
            q.cancel_join_thread()
            q.close()


def open_call(events: list[Event]) -> Event | None:
    """The blocking call (send, receive, wait, collective) a rank was last inside; None: computing."""
    open_calls = [e for e in events if not e.ended and e.kind not in ("isend", "irecv", "read-pending")]
    ended = {(e.kind, e.peer, e.op) for e in events if e.ended}
    still = [e for e in open_calls if (e.kind, e.peer, e.op) not in ended] or open_calls
    return still[-1] if still else None


def _deadlock_text(waiting: list[int], events: list[list[Event]], idle: float) -> str:
    """Which ranks were still waiting after `idle` seconds, and on what."""
    lines = []
    for rank in waiting:
        call = open_call(events[rank])
        lines.append(f"rank {rank}: {_describe_wait(call) if call is not None else 'still computing'}")
    ranks = ", ".join(str(r) for r in waiting)
    return f"ranks {ranks} were still waiting after {idle:g} s ({'; '.join(lines)})"


def _describe_wait(event: Event) -> str:
    peer = "any rank" if event.peer is None else f"rank {event.peer}"
    if event.kind == "recv" or (event.kind == "wait" and event.op == "irecv"):
        return f"waiting to receive from {peer}"
    if event.kind == "send" or (event.kind == "wait" and event.op == "isend"):
        return f"waiting for {peer} to receive what it sent"
    return f"inside {event.kind}"


_POOLS: dict[int, _Pool] = {}


def pool(world: int) -> _Pool:
    """The kernel's pool of `world` ranks, started (or restarted, if a worker died) as needed."""
    found = _POOLS.get(world)
    if found is not None and not found.healthy():
        found.stop()
        found = None
    if found is None:
        found = _POOLS[world] = _Pool(world)
    return found


def shutdown(world: int | None = None) -> None:
    """Stop the pool of `world` ranks (every pool when None)."""
    for size in list(_POOLS) if world is None else [world]:
        found = _POOLS.pop(size, None)
        if found is not None:
            found.stop()


atexit.register(shutdown)


def run_cases(
    fn: Callable[..., Any], cases: Sequence[Sequence[tuple[Any, ...]]], idle: float = IDLE_SECONDS
) -> list[Outcome]:
    """Run `fn(*case[r])` on rank r of len(case) ranks for each case, in order, on one pool.

    All cases have as many ranks. Raises `RankRaised` (the first case in which a rank raised) or
    `Deadlock` (no rank made progress for `idle` seconds); the pool is then stopped, and the next
    call starts a fresh one.
    """
    worlds = {len(case) for case in cases}
    if len(worlds) != 1:
        raise ValueError(f"every case needs the same number of ranks, got {sorted(worlds)}")
    world = worlds.pop()
    workers = pool(world)
    try:
        return workers.run(fn, cases, idle)
    except BaseException:  # a failure, a deadlock or an interrupt: the group's state is unknown
        shutdown(world)
        raise


def run_on_ranks(
    fn: Callable[..., Any], per_rank_args: Sequence[tuple[Any, ...]], idle: float = IDLE_SECONDS
) -> list[Any]:
    """What `fn(*per_rank_args[r])` returns on each rank r of len(per_rank_args) processes.

    What a rank prints is printed here, each line after its rank ("[rank 1] ...").

    >>> import torch.distributed as dist
    >>> run_on_ranks(lambda x: x + dist.get_rank(), [(10,), (10,)])
    [10, 11]
    """
    outcome = run_cases(fn, [per_rank_args], idle)[0]
    for rank, text in enumerate(outcome.printed):
        for line in text.splitlines():
            print(f"[rank {rank}] {line}")
    return outcome.outputs
