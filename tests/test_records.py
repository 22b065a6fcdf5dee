"""The records of calls (commviz/rank/records.py), made and ended without torch or ranks."""

from __future__ import annotations

import subprocess
import sys
import threading
import types

import pytest

from commviz.rank import records
from commviz.rank.records import (
    BYTES_IN,
    BYTES_OUT,
    COLLECTIVE,
    DTYPE,
    FLAGS,
    GID,
    ID,
    OP,
    PARENT,
    PEER,
    RECV,
    SEND,
    SEQ,
    SITE,
    T_END,
    T_START,
)
from commviz.wire import protocol

NO = protocol.NO_CODE
ALL_REDUCE, SEND_CODE, RECV_CODE = (protocol.OP_CODE[n] for n in ("all_reduce", "send", "recv"))


@pytest.fixture
def queued(monkeypatch):
    """Fresh counters and tables; what start() queues lands in the returned list."""
    out: list[list] = []
    for name, value in (("push", out.append), ("emitter", None), ("gpu_timer", None),
                        ("device", "cpu"), ("in_ddp_hook", set()), ("_p2p_sent", {}),
                        ("_p2p_received", {}), ("_dtype_codes", {}), ("_sites", {}),
                        ("sites_by_instr", {}), ("_site_codes", {})):
        monkeypatch.setattr(records, name, value)
    return out


def group(gid: int = 3, ranks: tuple[int, ...] = (0, 1, 2), nccl: bool = False):
    return types.SimpleNamespace(gid=gid, ranks=ranks, seq=0, nccl=nccl, no_future=set())


class Dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


def tensor(dtype: str = "float32", cuda: bool = False, index: int = 0):
    return types.SimpleNamespace(dtype=Dtype(dtype), is_cuda=cuda,
                                 device=types.SimpleNamespace(index=index))


def collective(info=None, **kw):
    args = dict(op_code=ALL_REDUCE, kind=COLLECTIVE, parent_code=NO, info=info or group(),
                peer=-1, b_in=16, b_out=16, tensor=tensor(), async_op=False, site=7)
    args.update(kw)
    return records.start(**args)


# ---- the layout ------------------------------------------------------------------------
def test_the_protocols_columns_are_the_records_fields():
    records.check_layout(protocol.COLUMNS)
    assert [ID, OP, PARENT, GID, SEQ, PEER, BYTES_IN, BYTES_OUT, DTYPE, FLAGS, T_START,
            T_END, SITE] == [list(protocol.COLUMNS).index(n) for n in records.FIELDS]


@pytest.mark.parametrize("edit", ["swap", "add", "rename"])
def test_a_layout_edited_on_one_side_only_is_refused(edit):
    columns = dict(protocol.COLUMNS)
    if edit == "swap":
        names = list(columns)
        names[1], names[2] = names[2], names[1]
        columns = {n: protocol.COLUMNS[n] for n in names}
    elif edit == "add":
        columns["stream"] = "<i4"
    else:
        columns = {("rank_peer" if n == "peer" else n): dt for n, dt in columns.items()}
    with pytest.raises(RuntimeError, match="protocol.COLUMNS .* change both"):
        records.check_layout(columns)


def test_a_record_holds_each_value_in_its_protocol_column(queued):
    info = group(gid=5, nccl=False)
    rec = records.start(ALL_REDUCE, COLLECTIVE, protocol.OP_CODE["gather_object"], info, 2,
                        11, 22, tensor("bfloat16"), True, 9)
    assert queued == [rec]
    row = dict(zip(protocol.COLUMNS, rec, strict=True))
    assert row["op"] == ALL_REDUCE and row["parent"] == protocol.OP_CODE["gather_object"]
    assert (row["gid"], row["seq"], row["peer"]) == (5, 1, 2)
    assert (row["bytes_in"], row["bytes_out"]) == (11, 22)
    assert row["dtype"] == protocol.DTYPE_CODE["bfloat16"]
    assert row["flags"] == protocol.FLAG_ASYNC
    assert row["t_start"] > 0 and row["t_end"] == -1 and row["site"] == 9


def test_ids_increase_and_an_unknown_dtype_is_other(queued):
    first = collective(tensor=tensor("float4_e2m1fn"))
    second = collective(tensor=None)
    assert second[ID] > first[ID]
    assert first[DTYPE] == protocol.DTYPE_CODE["other"] and second[DTYPE] == NO


# ---- numbering -------------------------------------------------------------------------
def test_collectives_count_per_group_and_transfers_per_peer(queued):
    a, b = group(gid=0), group(gid=1)
    assert [collective(info=g)[SEQ] for g in (a, a, b, a)] == [1, 2, 1, 3]
    sends = [collective(op_code=SEND_CODE, kind=SEND, peer=p)[SEQ] for p in (1, 1, 2)]
    recvs = [collective(op_code=RECV_CODE, kind=RECV, peer=p)[SEQ] for p in (1, 2, 2)]
    assert sends == [1, 2, 1] and recvs == [1, 1, 2]


def test_a_receive_from_any_source_is_numbered_once_its_source_is_known(queued):
    collective(op_code=RECV_CODE, kind=RECV, peer=2)
    rec = collective(op_code=RECV_CODE, kind=RECV, peer=-1)
    assert (rec[PEER], rec[SEQ]) == (-1, 0)
    records.resolve_source(rec, 2)
    assert (rec[PEER], rec[SEQ]) == (2, 2)
    records.resolve_source(rec, 1)  # known already: unchanged
    assert (rec[PEER], rec[SEQ]) == (2, 2)


# ---- flags and side effects ------------------------------------------------------------
def test_calls_from_a_ddp_comm_hook_thread_are_flagged(queued):
    assert not collective()[FLAGS] & protocol.FLAG_DDP
    records.in_ddp_hook.add(threading.get_ident())
    assert collective()[FLAGS] & protocol.FLAG_DDP


def test_cuda_tensors_name_the_device_and_nccl_ones_start_gpu_timing(queued, monkeypatch):
    started = []
    monkeypatch.setattr(records, "_start_gpu_timer", lambda: started.append(1))
    gloo = collective(tensor=tensor(cuda=True, index=1))
    assert gloo[FLAGS] == protocol.FLAG_CUDA and records.device == "cuda:1" and not started
    nccl = collective(info=group(nccl=True), tensor=tensor(cuda=True, index=1))
    assert nccl[FLAGS] == protocol.FLAG_CUDA | protocol.FLAG_GPU_TIME and started == [1]


def test_inner_transfers_of_an_object_collective_add_up_on_its_thread(queued):
    records.tls.acc = [0, 0]
    try:
        for _ in range(2):
            collective(op_code=SEND_CODE, kind=SEND, peer=1, b_in=8, b_out=0,
                       parent_code=protocol.OP_CODE["send_object_list"])
        collective(b_in=100, b_out=100)  # no parent: not part of it
        assert records.tls.acc == [16, 0]
    finally:
        records.tls.acc = None


# ---- ends --------------------------------------------------------------------------------
def test_complete_and_finish_end_a_record_now(queued):
    done, failed = collective(), collective()
    failed[FLAGS] |= protocol.FLAG_GPU_TIME
    records.complete(done)
    records.finish(failed, failed=True)
    assert done[T_END] >= done[T_START] and not done[FLAGS] & protocol.FLAG_FAILED
    assert failed[T_END] >= failed[T_START]
    assert failed[FLAGS] & protocol.FLAG_FAILED and not failed[FLAGS] & protocol.FLAG_GPU_TIME


def test_unwaited_ends_a_record_flagged(queued):
    rec = collective()
    rec[FLAGS] |= protocol.FLAG_GPU_TIME
    records.unwaited(rec)
    assert rec[T_END] > 0
    assert rec[FLAGS] & protocol.FLAG_UNWAITED and not rec[FLAGS] & protocol.FLAG_GPU_TIME


class Future:
    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.callbacks = error, []

    def then(self, callback):
        self.callbacks.append(callback)

    def value(self):
        if self.error is not None:
            raise self.error

    def run(self):
        for callback in self.callbacks:
            callback(self)


class Work:
    def __init__(self, future: Future | None = None, source: int = 0,
                 error: Exception | None = None) -> None:
        self.future, self.source, self.error, self.waits = future, source, error, 0
        self.label = "real work"

    def get_future(self):
        if self.future is None:
            raise RuntimeError("this backend's work has no future")
        return self.future

    def wait(self, timeout=None):
        self.waits += 1
        if self.error is not None:
            raise self.error
        return True

    def is_completed(self):
        return True

    def _source_rank(self):
        return self.source


def test_async_work_with_a_future_ends_when_the_future_does(queued):
    rec, fut = collective(async_op=True), Future()
    work = Work(fut)
    assert records.track_async(rec, work, group(), "all_reduce") is work
    assert rec[T_END] == -1
    fut.run()
    assert rec[T_END] > 0 and not rec[FLAGS] & protocol.FLAG_FAILED
    failing, bad = collective(async_op=True), Future(RuntimeError("peer gone"))
    records.track_async(failing, Work(bad), group(), "all_reduce")
    bad.run()
    assert failing[FLAGS] & protocol.FLAG_FAILED


def test_work_without_a_future_is_timed_by_its_wait(queued):
    info = group()
    rec = collective(async_op=True)
    timed = records.track_async(rec, Work(), info, "all_reduce")
    assert isinstance(timed, records.TimedWork) and info.no_future == {"all_reduce"}
    assert timed.label == "real work"  # every other attribute is the real Work's
    assert timed.wait() is True and rec[T_END] > 0
    end = rec[T_END]
    timed.wait()
    assert rec[T_END] == end  # ended once
    p2p = records.track_async(collective(async_op=True), Work(Future()), info, "isend")
    assert isinstance(p2p, records.TimedWork)  # p2p: always by wait, never by its future


def test_timed_work_that_fails_is_dropped_or_polled(queued):
    failed = collective(async_op=True)
    with pytest.raises(RuntimeError):
        records.TimedWork(Work(error=RuntimeError("timeout")), failed, group()).wait()
    assert failed[FLAGS] & protocol.FLAG_FAILED
    dropped = collective(async_op=True)
    records.TimedWork(Work(), dropped, group())  # freed at once, never waited for
    assert dropped[FLAGS] & protocol.FLAG_UNWAITED and dropped[T_END] > 0
    polled = collective(async_op=True)
    assert records.TimedWork(Work(), polled, group()).is_completed()
    assert polled[T_END] > 0 and not polled[FLAGS] & protocol.FLAG_UNWAITED


def test_a_waited_receive_from_any_source_learns_its_source(queued):
    info = group(ranks=(4, 5, 6))
    rec = collective(op_code=RECV_CODE, kind=RECV, peer=-1, async_op=True)
    records.TimedWork(Work(source=2), rec, info).wait()
    assert (rec[PEER], rec[SEQ]) == (6, 1)


# ---- call sites and the emitter ----------------------------------------------------------
class Emitter:
    def __init__(self) -> None:
        self.queue: list[list] = []
        self.sites: dict[int, tuple[str, int]] = {}
        self.pollers: list = []
        self.pushed: list[list] = []
        self.ring = None  # no shared-memory ring: records go to the queue alone

    def note_site(self, sid: int, key: tuple[str, int]) -> None:
        self.sites[sid] = key

    def push(self, rec: list) -> None:
        self.pushed.append(rec)
        self.queue.append(rec)


def test_call_sites_are_numbered_once_and_told_to_the_emitter(queued):
    def here():
        return records.site_id(sys._getframe())

    first, again = here(), here()
    other = records.site_id(sys._getframe())
    assert first == again != other
    em = Emitter()
    records.attach(em)
    assert set(em.sites) == {first, other}  # the sites known before it
    line = sys._getframe().f_lineno + 1
    new = records.site_id(sys._getframe())
    assert em.sites[new] == (__file__, line)
    assert records.site_id(None) not in (first, other, new)


def test_attach_queues_on_the_emitter_and_a_forked_child_wakes_it(queued):
    em = Emitter()
    records.attach(em)
    rec = collective()
    assert em.queue == [rec] and em.pushed == []
    records._after_fork_in_child()
    forked, later = collective(), collective()
    assert em.pushed == [forked]  # the first record after a fork starts the sender
    assert em.queue == [rec, forked, later]
    records.detach()
    assert records.emitter is None


@pytest.mark.integration
def test_records_and_the_emitter_import_without_torch():
    code = ("import sys, commviz.rank.records, commviz.rank.emitter\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split() == ["False"]
