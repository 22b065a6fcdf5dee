"""The Prometheus metrics (commviz/viewer/metrics.py): a model and its diagnosis fed scripted
messages, scraped as Prometheus would (the exposition text), read back with
prometheus-client's own parser."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakes import T0_NS, FakeClock, bye, heartbeat, op_batch
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from commviz.viewer import metrics
from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.model import Model
from commviz.viewer.rank_state import State

G4 = {0: ("0", (0, 1, 2, 3))}
MS = 1_000_000


def _instance(seq: int, world: int = 4, late_rank: int | None = None, late_ms: float = 0.0,
              nbytes: int = 4096, took_ms: float = 1.0, op: str = "all_reduce"):
    """One instance of ``op``: every rank arrives at seq s (+0.1 ms a rank), the late rank
    ``late_ms`` after; all end ``took_ms`` after the last arrival."""
    group = {0: ("0", tuple(range(world)))}
    base = seq * 1000.0
    starts = {r: base + 0.1 * r + (late_ms if r == late_rank else 0.0) for r in range(world)}
    end = T0_NS + round((max(starts.values()) + took_ms) * MS)
    return [op_batch(r, [{"id": seq, "op": op, "seq": seq, "bytes_in": nbytes,
                          "bytes_out": nbytes, "t_start": T0_NS + round(starts[r] * MS),
                          "t_end": end}], group) for r in range(world)]


def _setup(world: int = 4):
    clock = FakeClock()
    model = Model(clock)
    diag = Diagnosis(model, wall_ns=clock.wall_ns)
    model.apply([heartbeat(r, world) for r in range(world)])
    return clock, model, diag


def _scrape(model, diag, intake: metrics.Intake | None = None) -> dict[str, dict[tuple, float]]:
    """The exposition text, parsed: sample name -> labels (sorted items) -> value."""
    intake = intake or metrics.Intake()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.Families(lambda: metrics.families(model, diag, intake)))
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        assert family.name.startswith("commviz_")
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


AR = (("op", "all_reduce"), ("ranks", "4"), ("size_bucket", "4096"))


def test_op_counts_bytes_times_and_bandwidths_by_op_group_size_and_size_bucket():
    clock, model, diag = _setup()
    for seq in range(1, 7):
        model.apply(_instance(seq))
    got = _scrape(model, diag)
    assert got["commviz_ops_total"] == {AR: 6}
    assert got["commviz_op_bytes_total"] == {AR: 6 * 4096}
    assert got["commviz_op_records_total"] == {(): 24}
    # each took 1 ms exactly, from the last arrival to the end: in the bucket le=0.001
    buckets = {dict(k)["le"]: v for k, v in got["commviz_op_duration_seconds_bucket"].items()}
    assert (buckets["0.0003"], buckets["0.001"], buckets["+Inf"]) == (0, 6, 6)
    assert got["commviz_op_duration_seconds_count"] == {AR: 6}
    assert got["commviz_op_duration_seconds_sum"][AR] == pytest.approx(0.006)
    # the stats panel's figures, in bytes/s: 4096 B in 1 ms; busbw x 2(n-1)/n = 1.5
    (row,) = model.stats_table()
    assert got["commviz_algbw_bytes_per_second"][AR] == row["algbw_gbps"] * 1e9 == \
        pytest.approx(4.096e6)
    assert got["commviz_busbw_bytes_per_second"][AR] == pytest.approx(1.5 * 4.096e6)


def test_a_size_bucket_sums_its_sizes_and_weighs_their_bandwidths_by_count():
    clock, model, diag = _setup()
    for seq in range(1, 4):  # 3000 B in 1 ms, then 4000 B in 2 ms: both at or below 4096
        model.apply(_instance(seq, nbytes=3000))
    model.apply(_instance(4, nbytes=4000, took_ms=2.0))
    model.apply(_instance(5, nbytes=0, op="barrier"))
    got = _scrape(model, diag)
    assert got["commviz_ops_total"][AR] == 4
    assert got["commviz_op_bytes_total"][AR] == 3 * 3000 + 4000
    assert got["commviz_algbw_bytes_per_second"][AR] == pytest.approx((3 * 3e6 + 2e6) / 4)
    barrier = (("op", "barrier"), ("ranks", "4"), ("size_bucket", "0"))
    assert got["commviz_ops_total"][barrier] == 1
    # a barrier moves nothing: no bandwidth rather than 0
    assert barrier not in got["commviz_algbw_bytes_per_second"]
    assert barrier not in got["commviz_busbw_bytes_per_second"]


@pytest.mark.parametrize(("size", "bucket"), [(0, "0"), (1, "1"), (2, "2"), (3, "4"),
                                              (4096, "4096"), (4097, "8192")])
def test_size_buckets_are_the_power_of_two_at_or_above(size, bucket):
    assert metrics.size_bucket(size) == bucket


def test_late_arrivals_and_findings_open_then_resolved():
    clock, model, diag = _setup()
    for seq in range(1, 4):  # rank 1 30 ms late three times: a straggler
        model.apply(_instance(seq, late_rank=1, late_ms=30))
    (found,) = diag.update()
    got = _scrape(model, diag)
    assert got["commviz_late_arrivals_total"] == {(("rank", "1"),): 3}
    # from the last but one arrival (rank 3, +0.3 ms) to rank 1's (+30.1 ms), three times
    assert got["commviz_late_arrival_wait_seconds_total"][(("rank", "1"),)] == \
        pytest.approx(3 * 0.0298)
    assert got["commviz_findings_open"][(("type", "straggler"),)] == 1
    assert got["commviz_findings_total"][(("type", "straggler"),)] == 1
    assert got["commviz_findings_resolved_total"][(("type", "straggler"),)] == 0
    clock.advance(2.0)
    model.apply([heartbeat(r, 4) for r in range(4)])
    for seq in range(4, 7):  # on time again: it clears
        model.apply(_instance(seq))
    diag.update()
    assert [f.type for f in diag.update()] + [f.type for f in diag.history] == \
        ["straggler", "resolved"]
    got = _scrape(model, diag)
    assert got["commviz_findings_open"][(("type", "straggler"),)] == 0
    assert got["commviz_findings_resolved_total"][(("type", "straggler"),)] == 1
    assert set(got["commviz_findings_open"]) == {(("type", t),) for t in
                                                 ("straggler", "hang", "failed", "lost_rank",
                                                  "mismatch", "slow")}


def test_late_arrivals_keep_the_ranks_waited_for_longest_only():
    world = metrics.LATE_RANKS_MAX + 6
    clock, model, diag = _setup(world)
    for rank in range(1, world):  # rank r late by 100 + r ms, once
        model.apply(_instance(rank, world, late_rank=rank, late_ms=100.0 + rank))
    late = _scrape(model, diag)["commviz_late_arrivals_total"]
    assert len(diag.late_arrivals()) == world - 1
    assert {dict(k)["rank"] for k in late} == {str(r) for r in range(6, world)}


def test_ranks_alive_by_node_by_the_ranks_panels_rule():
    clock, model, diag = _setup()
    other = replace(heartbeat(3, 4), host="node1")
    model.apply([other])
    assert _scrape(model, diag)["commviz_ranks_alive"] == {(("node", "node0"),): 3,
                                                           (("node", "node1"),): 1}
    model.apply([bye(0)])
    clock.advance(5.0)  # silent but rank 2, which still beats
    model.apply([heartbeat(2, 4)])
    got = _scrape(model, diag)
    assert got["commviz_ranks_alive"] == {(("node", "node0"),): 1, (("node", "node1"),): 0}
    states = {k: v for k, v in got["commviz_ranks"].items() if v}
    assert states == {(("node", "node0"), ("state", "exited")): 1,
                      (("node", "node0"), ("state", "silent")): 1,
                      (("node", "node0"), ("state", "idle")): 1,
                      (("node", "node1"), ("state", "silent")): 1}


def test_viewer_lag_and_what_the_intake_let_go_of():
    clock, model, diag = _setup()
    model.behind_s = 2.5
    model.apply([heartbeat(1, 4, dropped=0), bye(1, dropped=7)])
    got = _scrape(model, diag, metrics.Intake(rejected=3, shed={"telemetry": 11},
                                              dropped_by_relays=5))
    assert got["commviz_viewer_behind_seconds"] == {(): 2.5}
    assert got["commviz_messages_rejected_total"] == {(): 3}
    assert got["commviz_messages_shed_total"][(("kind", "telemetry"),)] == 11
    assert got["commviz_messages_shed_total"][(("kind", "phases"),)] == 0
    assert got["commviz_op_records_dropped_total"] == {(("by", "ranks"),): 7,
                                                       (("by", "relays"),): 5}


@pytest.mark.parametrize(("spec", "address"), [("9464", ("127.0.0.1", 9464)),
                                               ("0.0.0.0:9464", ("0.0.0.0", 9464)),
                                               ("[::1]:9464", ("::1", 9464))])
def test_metrics_addresses_default_to_loopback(spec, address):
    assert metrics.parse_address(spec) == address


@pytest.mark.parametrize("spec", ["", "host:", "0", "65536", "host:port", "-1"])
def test_a_wrong_metrics_address_says_what_to_give(spec):
    with pytest.raises(ValueError, match=r"\[HOST:\]PORT"):
        metrics.parse_address(spec)


def test_a_scrape_reads_its_statistics_rows_as_they_were_under_the_lock():
    """The rows' percentiles are figured after the lock: what the model takes in meanwhile
    changes none of the copies read under it."""
    clock, model, diag = _setup()
    for seq in range(1, 4):
        model.apply(_instance(seq))
    taken = metrics.take(model, diag, metrics.Intake())
    for seq in range(4, 9):
        model.apply(_instance(seq, took_ms=5.0))
    (ops, _, times, algbw, *_) = taken.families()
    assert [s.value for s in ops.samples] == [3]
    assert [s.value for s in times.samples if s.name.endswith("_count")] == [3]
    assert [s.value for s in algbw.samples] == [pytest.approx(4.096e6)]


def test_at_a_thousand_ranks_the_labels_stay_bounded():
    from fleet_model import fleet_view

    view = fleet_view(1024, 2.0, faults=("straggler:517:30",), fault_at=1.0)
    got = _scrape(view.model, view.diagnosis)
    assert sum(got["commviz_ranks_alive"].values()) == 1024
    assert len(got["commviz_ranks_alive"]) == len(view.model.nodes())
    late = got["commviz_late_arrivals_total"]
    assert 0 < len(late) <= metrics.LATE_RANKS_MAX and (("rank", "517"),) in late
    assert len(got["commviz_ranks"]) == len(view.model.nodes()) * len(State)


def test_the_commands_say_what_is_wrong_with_metrics_before_starting_anything(capsys):
    from commviz import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(["watch", "--headless", "--metrics", "host:port"])
    assert exit_.value.code == 2
    assert "argument --metrics: 'host:port': give [HOST:]PORT" in capsys.readouterr().err
    assert cli.main(["run", "--no-viewer", "--metrics", "9464", "--", "true"]) == 2
    assert "--no-viewer starts no viewer: --metrics needs one" in capsys.readouterr().err
