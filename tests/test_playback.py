"""Playing a recording back (commviz play): the clock, the schedule of its messages and the
session that feeds the model, pure (no Textual, no sockets)."""

import json
import time

import pytest
from fakes import (
    STEP_NS,
    T0_NS,
    FakeClock,
    bye,
    heartbeats,
    inflight,
    op_batch,
    scripted_all_reduce,
)

from commviz.viewer import recording
from commviz.viewer.playback import (
    LEAD_NS,
    ROUND_NS,
    SETTLE_NS,
    TAIL_NS,
    Playback,
    PlaybackClock,
    PlaybackControl,
    Timetable,
)
from commviz.viewer.session import DIAGNOSE_EVERY_S
from commviz.wire import protocol


def _record(path, messages, about=None, closed_ns=None):
    """A recording of ``messages``, closed at ``closed_ns`` (default: with the last one)."""
    rec = recording.Recorder(path, about)
    rec.write(messages)
    ends = [t for m in messages for t in (getattr(m, "t_ns", 0),
                                          *getattr(m, "cols", {}).get("t_end", ()))]
    rec.close({"t_ns": int(closed_ns if closed_ns is not None else max(ends, default=0))})
    return path


def _three_steps(tmp_path, about=None, world=2):
    """Two ranks, three all_reduce instances 1 ms apart, then goodbyes."""
    messages = scripted_all_reduce(world=world, steps=3)
    last = T0_NS + 3 * STEP_NS
    return _record(tmp_path / "r.jsonl", [*messages, *(bye(r, last) for r in range(world))],
                   about)


def _end_of_instance(k, world=2):
    """When instance k of scripted_all_reduce ends (as fakes.scripted_collective times it)."""
    return T0_NS + k * STEP_NS + (world - 1) * 10_000 + 250_000 + k * 50_000


# ---- the clock -------------------------------------------------------------------------

def test_the_clock_runs_at_its_speed_and_stands_still_while_anything_stops_it():
    real = FakeClock()
    clock = PlaybackClock(1_000, speed=2.0, real=real)
    real.advance(1.0)
    assert clock.wall_ns() == 1_000 + 2_000_000_000
    clock.stop("paused")
    clock.stop("held")
    real.advance(5.0)
    clock.go("paused")
    assert clock.wall_ns() == 1_000 + 2_000_000_000  # still held
    clock.go("held")
    real.advance(0.5)
    assert clock.wall_ns() == 1_000 + 3_000_000_000
    clock.set_speed(0.5)
    real.advance(2.0)
    assert clock.wall_ns() == 1_000 + 4_000_000_000
    assert clock.seconds() == pytest.approx(clock.wall_ns() / 1e9)


def test_the_clock_jumps_only_forward_and_a_reset_forgets_the_end():
    real = FakeClock()
    clock = PlaybackClock(1_000, real=real)
    clock.jump(500)
    assert clock.wall_ns() == 1_000
    clock.jump(9_000)
    assert clock.wall_ns() == 9_000
    clock.stop("end", at_ns=7_000)
    assert clock.wall_ns() == 7_000 and clock.stopped("end")
    clock.reset(1_000)
    assert not clock.stopped() and clock.wall_ns() == 1_000


# ---- the schedule ----------------------------------------------------------------------

def test_ops_are_due_at_their_end_announced_ones_after_their_start_untimed_with_the_one_before():
    hb = heartbeats(2, t_ns=0)[0]  # an identity with no time: a `rank` line read back
    batch = scripted_all_reduce(world=2, steps=3)[2]  # rank 0's three records
    running = inflight(1, "all_reduce", 7, t_start=T0_NS + 10 * STEP_NS, world=2)
    goodbye = bye(0, T0_NS + 40 * STEP_NS)
    schedule = Timetable([hb, batch, running, goodbye])
    assert len(schedule) == 6
    assert schedule.take(_end_of_instance(0) - 1) == []
    ident, first = schedule.take(_end_of_instance(1))  # untimed, first: with the earliest
    assert ident is hb
    assert isinstance(first, protocol.OpBatch) and first.cols["seq"].tolist() == [0, 1]
    (rest,) = schedule.take(_end_of_instance(2))
    assert rest.cols["seq"].tolist() == [2]
    announced = T0_NS + 10 * STEP_NS + 20_000_000
    assert schedule.take(announced - 1) == []
    (run,) = schedule.take(announced)
    assert run.cols["t_end"].tolist() == [-1]
    assert schedule.next_ns() == goodbye.t_ns
    assert schedule.take(goodbye.t_ns) == [goodbye] and schedule.done
    schedule.rewind()
    assert schedule.next_ns() == schedule.first_ns


def test_rows_of_several_batches_due_together_come_as_one_batch_each():
    messages = scripted_all_reduce(world=2, steps=3)
    schedule = Timetable(messages)
    taken = schedule.take(_end_of_instance(2))
    batches = [m for m in taken if isinstance(m, protocol.OpBatch)]
    assert [b.rank for b in batches] == [0, 1]
    assert all(len(b) == 3 for b in batches)


# ---- the playback ----------------------------------------------------------------------

def test_ops_reach_the_model_as_the_recordings_clock_passes_their_end(tmp_path):
    real = FakeClock()
    playback = Playback(_three_steps(tmp_path), real=real)
    assert playback.start_ns == T0_NS - LEAD_NS
    playback.advance()
    assert playback.model.instances == 0 and not playback.model.ranks  # LEAD_NS early
    real.advance((_end_of_instance(1) - playback.start_ns) / 1e9)
    playback.advance()
    assert playback.model.instances == 2 and set(playback.model.ranks) == {0, 1}
    real.advance(1.0)
    playback.advance()
    assert playback.model.instances == 3
    assert all(s.exited for s in playback.model.ranks.values())
    assert playback.clock.stopped("end") and playback.clock.wall_ns() == playback.end_ns
    assert playback.diagnosis.findings() == []


def test_a_demos_recording_holds_after_each_operation_until_the_replay_lets_it_go(tmp_path):
    real = FakeClock()
    playback = Playback(_three_steps(tmp_path, {"demo": "all_reduce"}), real=real)
    control = PlaybackControl(playback, each_op=playback.demo is not None)
    real.advance(10.0)  # far past every op
    playback.advance()
    assert playback.model.instances == 1 and control.state.held
    assert playback.clock.wall_ns() == _end_of_instance(0)
    control.hold(True)  # the replay is busy with it
    playback.advance()
    assert playback.model.instances == 1
    control.hold(False)  # done: the next one, once its time has come
    playback.advance()
    assert playback.model.instances == 1
    real.advance(0.01)
    playback.advance()
    assert playback.model.instances == 2 and playback.clock.wall_ns() == _end_of_instance(1)


def test_a_jobs_recording_is_not_held_for_the_replay(tmp_path):
    real = FakeClock()
    playback = Playback(_three_steps(tmp_path, {"title": {"en": "run · python t.py"}}),
                        real=real)
    PlaybackControl(playback, each_op=playback.demo is not None)
    real.advance(10.0)
    playback.advance()
    assert playback.model.instances == 3 and playback.clock.stopped("end")


def test_paused_n_steps_from_one_operation_to_the_next_then_stays_at_the_end(tmp_path):
    real = FakeClock()
    playback = Playback(_three_steps(tmp_path), real=real)
    control = PlaybackControl(playback, paused=True)
    real.advance(10.0)
    playback.advance()
    assert playback.model.instances == 0  # paused from the start
    for k in range(3):
        control.step()
        assert playback.model.instances == k + 1
        assert playback.clock.wall_ns() == _end_of_instance(k)
    control.step()  # the goodbyes, then nothing
    control.step()
    assert playback.model.instances == 3 and control.paused
    control.toggle()
    playback.advance()
    assert control.ended and not control.paused


def test_step_stops_at_an_op_seen_running(tmp_path):
    world = 2
    running = [inflight(r, "all_reduce", 5, t_start=T0_NS + 10 * STEP_NS, world=world)
               for r in range(world)]
    path = _record(tmp_path / "h.jsonl", [*heartbeats(world), *running])
    playback = Playback(path, real=FakeClock())
    control = PlaybackControl(playback, paused=True)
    control.step()
    assert len(playback.model.inflight) >= 1


def test_playing_when_not_paused_n_pauses_first(tmp_path):
    playback = Playback(_three_steps(tmp_path), real=FakeClock())
    control = PlaybackControl(playback)
    control.step()
    assert control.paused and playback.model.instances == 0


def test_restart_begins_again_on_an_empty_model(tmp_path):
    real = FakeClock()
    playback = Playback(_three_steps(tmp_path), real=real)
    control = PlaybackControl(playback)
    real.advance(10.0)
    playback.advance()
    assert playback.model.instances == 3 and control.ended
    control.restart()
    playback.reset()
    assert playback.model.instances == 0 and not control.ended
    assert playback.clock.wall_ns() == playback.start_ns
    real.advance(10.0)
    playback.advance()
    assert playback.model.instances == 3


def test_speed_keys_double_and_halve_within_their_range(tmp_path):
    playback = Playback(_three_steps(tmp_path), speed=1.0, real=FakeClock())
    control = PlaybackControl(playback)
    assert [control.faster() for _ in range(8)][-2:] == [64.0, 64.0]
    assert [control.slower() for _ in range(12)][-2:] == [1 / 16, 1 / 16]


def test_an_empty_recording_is_an_error_that_says_so(tmp_path):
    path = _record(tmp_path / "e.jsonl", [])
    with pytest.raises(recording.RecordingError, match="nothing was recorded"):
        Playback(path)


# ---- what the recording keeps for it --------------------------------------------------

def test_the_recording_keeps_running_ops_and_telemetry_that_only_playback_reads(tmp_path):
    world = 2
    messages = [*heartbeats(world),
                inflight(0, "all_reduce", 1, t_start=T0_NS, world=world)]
    path = _record(tmp_path / "r.jsonl", messages, {"title": {"en": "t"}, "demo": "x"})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["demo"] == "x" and lines[0]["title"] == {"en": "t"}
    (running,) = [line for line in lines if line.get("kind") == "running"]
    assert "t_end_ns" not in running and running["seq"] == 1
    # commviz stats reads completed ops only, and heartbeats only for their identity
    assert not any(isinstance(m, protocol.OpBatch) for m in recording.read(path))
    back = list(recording.read(path, playback=True))
    (batch,) = [m for m in back if isinstance(m, protocol.OpBatch)]
    assert batch.cols["t_end"].tolist() == [-1]
    tel = [m for m in back if isinstance(m, protocol.Heartbeat) and m.telemetry]
    assert {m.rank: m.telemetry["cpu_pct"] for m in tel} == {0: 10.0, 1: 30.0}


def test_what_the_last_messages_say_is_judged_when_the_recording_ends(tmp_path):
    """A hang that a timeout ended: ranks 0 and 1 wait in an all_reduce rank 2 never calls,
    and their failed records come last; the clock stops with them, and the diagnosis must
    still see them (it said "hang" for ever)."""
    world, start = 3, T0_NS + STEP_NS
    running = [inflight(r, "all_reduce", 1, t_start=start, world=world) for r in (0, 1)]
    failed = [op_batch(r, [{"id": 100, "op": "all_reduce", "seq": 1, "t_start": start,
                            "t_end": start + 6_000_000_000, "flags": protocol.FLAG_FAILED}],
                       groups={0: ("0", (0, 1, 2))}) for r in (0, 1)]
    beats = [h for t in range(7) for h in heartbeats(world, t_ns=start + t * 1_000_000_000)]
    path = _record(tmp_path / "h.jsonl", [*beats[:world], *running, *beats[world:], *failed])
    real = FakeClock()
    playback = Playback(path, real=real)
    for _ in range(30):  # taken every 0.1 s, as the collector's rounds do
        real.advance(0.1)
        playback.advance()
    assert [f.type for f in playback.diagnosis.findings()] == ["hang"]
    while not playback.clock.stopped("end"):  # the end lies within a diagnosis' period
        real.advance(0.1)
        playback.advance()
    assert [f.type for f in playback.diagnosis.findings()] == ["failed"]


def test_seeking_takes_in_everything_before_at_once(tmp_path):
    real = FakeClock()
    playback = Playback(_three_steps(tmp_path, {"demo": "all_reduce"}), real=real)
    PlaybackControl(playback, each_op=True)  # seeking is not held for the replay
    playback.seek((_end_of_instance(1) - playback.origin_ns) / 1e9)
    assert playback.model.instances == 2 and not playback.clock.stopped()
    assert playback.origin_ns == playback.start_ns + LEAD_NS  # its first message
    assert playback.duration_s == pytest.approx((T0_NS + 3 * STEP_NS - playback.origin_ns) / 1e9)


def test_the_launchers_events_come_at_their_time_and_malformed_ones_are_left_out(tmp_path):
    path = tmp_path / "e.jsonl"
    rec = recording.Recorder(path)
    rec.write(scripted_all_reduce(world=2, steps=1, t0_ns=time.time_ns() - 1_000_000_000))
    failed = {"who": "rank 1", "code": -9, "line": "killed by SIGKILL, no error written"}
    rec.write_event("rank failed", failed)
    rec.write_event("rank failed", {"who": "rank 0"})  # no code nor line: left out
    rec.write_event("no such event", {})
    rec.write_event("stopping others", {})
    rec.write_event("rank finished", {"who": "rank 2\x1b[2J"})  # an escape: drawn as text
    rec.close({})
    lines = path.read_text().splitlines(keepends=True)  # two more, at one time
    same = [json.dumps({"kind": "event", "t_ns": int(time.time_ns()), "key": "job ended",
                        "fields": {"n": n}}) + "\n" for n in (1, 2)]
    path.write_text("".join(lines[:-1] + [same[0], same[1].replace(
        str(json.loads(same[1])["t_ns"]), str(json.loads(same[0])["t_ns"]))] + lines[-1:]))
    playback = Playback(path, real=FakeClock())
    playback.seek(0)
    assert playback.take_events() == []
    playback.seek(playback.duration_s)
    assert playback.take_events() == [("rank failed", failed), ("stopping others", {}),
                                      ("rank finished", {"who": "rank 2"}),
                                      ("job ended", {"n": 1}), ("job ended", {"n": 2})]
    assert playback.take_events() == []


def test_a_jobs_output_comes_at_the_time_it_was_read_and_feeds_nccls_log(tmp_path):
    path = tmp_path / "o.jsonl"
    rec = recording.Recorder(path)
    rec.write(scripted_all_reduce(world=2, steps=1, t0_ns=time.time_ns() - 1_000_000_000))
    lines = ["step 0 loss 2.3", "gpu-a:4001:4001 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
             "done"]
    for text in lines:
        rec.write_output(text)
    rec.close({})
    extra = {"out": []}
    list(recording.read(path, lines=extra))
    got = [(line["t_ns"], line["text"]) for line in extra["out"]]
    assert [text for _, text in got] == lines
    real = FakeClock()
    playback = Playback(path, real=real)
    assert playback.output is not None and playback.output.total == 0
    assert got[-1][0] <= playback.end_ns <= got[-1][0] + 1_000_000_000  # then it closed
    playback.seek((got[0][0] - playback.origin_ns) / 1e9)
    assert [line.text for line in playback.output.since(0)] == lines[:1]
    playback.seek(playback.duration_s)
    assert [line.text for line in playback.output.since(0)] == lines
    assert playback.nccl.version == "2.21.5+cuda12.4"  # NCCL's line was read
    playback.reset()
    assert playback.output.since(3)[0].text.startswith("──── played again")
    assert playback.nccl.version is None


def test_a_recording_without_a_jobs_output_has_no_output_panel(tmp_path):
    assert Playback(_three_steps(tmp_path), real=FakeClock()).output is None


def test_a_rank_that_died_silent_is_named_lost_by_the_time_the_viewer_closed(tmp_path):
    """The crash demo played back: rank 1's last heartbeat at 1 s, the others' goodbyes at
    1.7 s, the viewer closed at 2.6 s: live it named rank 1 lost; the playback ended at the
    last goodbye and said nothing."""
    world, t0 = 3, T0_NS
    beats = [*heartbeats(world, t_ns=t0), *heartbeats(world, t_ns=t0 + 1_000_000_000)]
    goodbyes = [bye(r, t0 + 1_700_000_000) for r in (0, 2)]
    path = _record(tmp_path / "c.jsonl", [*beats, *goodbyes], closed_ns=t0 + 2_600_000_000)
    real = FakeClock()
    playback = Playback(path, real=real)
    assert playback.end_ns == t0 + 2_600_000_000
    while not playback.clock.stopped("end"):
        real.advance(0.1)
        playback.advance()
    assert [(f.type, f.ranks) for f in playback.diagnosis.findings()] == [("lost_rank", (1,))]


def test_the_playback_ends_soon_after_the_last_message_of_a_viewer_left_open(tmp_path):
    path = _record(tmp_path / "o.jsonl", scripted_all_reduce(world=2, steps=1),
                   closed_ns=T0_NS + 3600 * 1_000_000_000)
    playback = Playback(path, real=FakeClock())
    assert playback.end_ns - playback.timetable.last_ns == TAIL_NS


def test_a_ranks_identity_read_back_adds_no_empty_telemetry_sample(tmp_path):
    """Played back, ranks read 'CPU 0% rss 0B' between their samples: the `rank` line's
    identity counted as a sample of nothing."""
    path = _record(tmp_path / "t.jsonl", [*heartbeats(2), *heartbeats(2, t_ns=T0_NS + 500)])
    playback = Playback(path, real=FakeClock())
    playback.seek(playback.duration_s)
    for rank, s in playback.model.ranks.items():
        assert [tel["cpu_pct"] for _, tel in s.telemetry] == [10.0 + 20 * rank] * 2


def _with_findings(path, *times_ns):
    """The recording at ``path`` with a straggler finding made at each of ``times_ns``, and
    a resolution (not a finding to go to) after the first."""
    lines = path.read_text().splitlines(keepends=True)
    diags = [json.dumps({"kind": "diag", "type": "straggler", "ranks": [1], "group": [0, 1],
                         "seq": 1, "message": "m", "t_ns": t}) + "\n" for t in times_ns]
    diags.insert(1, json.dumps({"kind": "diag", "type": "resolved", "ranks": [1],
                                "group": [0, 1], "seq": 2, "message": "over",
                                "t_ns": times_ns[0] + 1}) + "\n")
    path.write_text("".join(lines[:-1] + diags + lines[-1:]))
    return path


def test_f_goes_to_just_before_each_finding_the_live_diagnosis_made(tmp_path):
    ms = 1_000_000
    path = _with_findings(_record(tmp_path / "f.jsonl", scripted_all_reduce(world=2, steps=3),
                                  closed_ns=T0_NS + 5000 * ms), T0_NS + 3000 * ms,
                          T0_NS + 4500 * ms)
    playback = Playback(path, real=FakeClock())
    assert playback.finding_ns == [T0_NS + 3000 * ms, T0_NS + 4500 * ms]
    assert playback.to_next_finding() and playback.clock.wall_ns() == T0_NS + 1000 * ms
    assert playback.model.instances == 3  # everything before taken in
    # then just after the finding itself (closer to it than that), once this playback's
    # diagnosis has come; the next one's 2 s before lies behind: just after it too
    assert playback.to_next_finding() and playback.clock.wall_ns() == T0_NS + 3400 * ms
    assert playback.to_next_finding() and playback.clock.wall_ns() == T0_NS + 4900 * ms
    assert playback.next_finding_ns() is None and not playback.to_next_finding()
    assert playback.clock.wall_ns() == T0_NS + 4900 * ms


def test_f_lands_just_after_a_finding_once_this_playback_has_made_it(tmp_path):
    """A fast demo's operations went on for SETTLE_NS after the finding `f` went to."""
    ms = 1_000_000
    at = T0_NS + 3000 * ms
    group = {0: ("0", (0, 1, 2))}
    calls = [op_batch(r, [{"id": 1, "op": "broadcast" if r == 2 else "all_reduce", "seq": 1,
                           "peer": 0 if r == 2 else -1, "bytes_in": 4096, "t_start": at}],
                      group) for r in range(3)]
    path = _record(tmp_path / "m.jsonl", [*heartbeats(3), *calls,
                                          *heartbeats(3, t_ns=at + 900 * ms)],
                   closed_ns=at + 1000 * ms)
    lines = path.read_text().splitlines(keepends=True)
    made = json.dumps({"kind": "diag", "type": "mismatch", "ranks": [2], "group": [0, 1, 2],
                       "seq": 1, "message": "m", "t_ns": at + 5 * ms}) + "\n"
    path.write_text("".join([*lines[:-1], made, lines[-1]]))
    playback = Playback(path, real=FakeClock())
    assert playback.to_next_finding() and playback.clock.wall_ns() == at + 5 * ms - 2000 * ms
    assert not playback.diagnosis.history
    assert playback.to_next_finding()
    landed = playback.clock.wall_ns() - (at + 5 * ms)
    assert [(f.type, f.ranks) for f in playback.diagnosis.history] == [("mismatch", (2,))]
    # the diagnosis' next period, not SETTLE_NS
    assert 0 <= landed <= DIAGNOSE_EVERY_S * 1e9 + ROUND_NS < SETTLE_NS, landed / ms


def test_f_goes_to_a_finding_made_in_the_first_seconds_from_the_start(tmp_path):
    ms = 1_000_000
    path = _with_findings(_record(tmp_path / "f.jsonl", scripted_all_reduce(world=2, steps=3),
                                  closed_ns=T0_NS + 2000 * ms), T0_NS + 900 * ms)
    playback = Playback(path, real=FakeClock())
    assert playback.to_next_finding() and playback.clock.wall_ns() == T0_NS + 1300 * ms


def test_a_silence_is_judged_from_when_the_viewer_heard_the_rank_not_from_its_stamp(tmp_path):
    """A loaded rank's last heartbeat, stamped at 0.6 s, reached the viewer only at 1 s, with
    rank 0's goodbye; rank 1 never said goodbye, and its harvester said it ended at 2.1 s. Live,
    it was silent 1.1 s then, not lost (LOST_AFTER_S and LOST_CONFIRM_S: 1.2 s): its end is
    told by the harvester's account alone. Judged from the stamp, the playback would have
    found it lost at 1.8 s, before its end was known."""
    s, t0 = 1_000_000_000, T0_NS
    rec = recording.Recorder(tmp_path / "l.jsonl")
    rec.write(heartbeats(2, t_ns=t0), received_ns=t0)
    rec.write(heartbeats(2, t_ns=t0 + s // 2), received_ns=t0 + s // 2)
    rec.write([heartbeats(2, t_ns=t0 + 6 * s // 10)[1], bye(0, t0 + s)], received_ns=t0 + s)
    ended = t0 + 21 * s // 10
    rec.write([protocol.Gone(1, 1001, ended, 1, 1, 0, 0)], received_ns=ended)
    rec.close({"t_ns": ended + s // 5, "ended": [0, 1]})
    lines = [json.loads(x) for x in (tmp_path / "l.jsonl").read_text().splitlines()]
    # each batch taken off the socket: when, before its heartbeats, goodbyes and ends
    assert [(x["kind"], x["t_ns"]) for x in lines if x.get("kind") in ("rx", "bye", "gone")][-4:] \
        == [("rx", t0 + s), ("bye", t0 + s), ("rx", ended), ("gone", ended)]
    real = FakeClock()
    playback = Playback(tmp_path / "l.jsonl", real=real)
    while not playback.clock.stopped("end"):
        real.advance(0.02)
        playback.advance()
    told = [(f.type, f.ranks, f.facts.shape) for f in playback.diagnosis.history]
    assert told == [("lost_rank", (1,), "first_end")], told
