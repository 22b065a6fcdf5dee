"""commviz whatif: NCCL's cost model against hand-computed values of its published formulas
(tuning.cc's latencies, nccl-tests' bus factors), the step found in a recording's repeating
collectives, and the command on a recording, with its bad input."""

from __future__ import annotations

import re

import pytest
from fakes import T0_NS, bye, heartbeats, op_batch

from commviz import cli
from commviz.knowledge import costmodel, whatif
from commviz.knowledge.whatif import PRESETS, Scale, predict
from commviz.viewer import recording

GB = 1_000_000_000
NVL = 376e9  # the nvlink preset's bytes per second
NDR = 50e9


# ---- the model, by hand ------------------------------------------------------------------

@pytest.mark.parametrize(("op", "steps", "factor"), [
    ("all_reduce", 14, 2 * 7 / 8),          # ring: 2(n-1) steps, busbw factor 2(n-1)/n
    ("all_gather_into_tensor", 7, 7 / 8),   # n-1 steps, (n-1)/n
    ("reduce_scatter_tensor", 7, 7 / 8),
    ("broadcast", 8, 1.0),                  # a chain of n steps, factor 1
    ("reduce", 8, 1.0),
])
def test_one_node_ring_with_simple_is_base_plus_hops_plus_bytes_over_busbw(op, steps, factor):
    p = predict(op, GB, Scale(1, 8), PRESETS["nvlink"])
    assert (p.algorithm, p.protocol, p.intra_steps, p.inter_steps) == ("ring", "Simple",
                                                                       steps, 0)
    assert p.time_s == pytest.approx((8.4 + steps * 3.4) / 1e6 + GB * factor / NVL)
    assert p.network_s == 0 and p.congested_s == p.time_s


def test_all_to_all_is_every_peer_at_once_with_factor_n_minus_1_over_n():
    p = predict("all_to_all_single", GB, Scale(1, 8), PRESETS["pcie"])
    assert p.time_s == pytest.approx((8.4 + 5.7) / 1e6 + GB * 7 / 8 / 64e9)


def test_two_nodes_ring_counts_its_network_steps_with_their_overhead():
    """16 GPUs on 2 nodes: 30 steps, 2N = 4 of them across the network at 14 + 3 x 1 us."""
    p = predict("all_reduce", GB, Scale(2, 8), PRESETS["ib-ndr"])
    assert (p.algorithm, p.protocol, p.intra_steps, p.inter_steps) == ("ring", "Simple", 26, 4)
    wire = GB * 2 * 15 / 16 / NDR
    assert p.time_s == pytest.approx((8.4 + 26 * 3.4 + 4 * 17) / 1e6 + wire)
    assert p.network_s == pytest.approx(4 * 17 / 1e6 + wire)


def test_a_small_all_reduce_across_16_nodes_takes_the_tree_and_a_microsecond_costs_8():
    """Tree LL: 6.8 + 2((P-1) x 0.6 + log2(16) x (5.0 + 1)) = 63.2 us, against the ring's
    6.6 + 222 x 0.6 + 32 x 3.7 = 258.2 us; 1 us more a network hop: 2 log2(16) = 8 us more."""
    scale = Scale(16, 8)
    p = predict("all_reduce", 8, scale, PRESETS["ib-ndr"])
    assert (p.algorithm, p.protocol, p.inter_steps) == ("tree", "LL", 8)
    assert p.time_s == pytest.approx(63.2e-6 + 8 / (NDR * 0.9 / 3.8 * 0.5))
    ring = whatif._ring("all_reduce", 8, scale, PRESETS["ib-ndr"], 2 * 127 / 128, NDR / 1e9, "LL",
                        0.0)
    assert ring.time_s == pytest.approx(258.2e-6 + 8 * 2 * 127 / 128 / (NDR / 4))
    more = predict("all_reduce", 8, scale, PRESETS["ib-ndr"], extra_us=1.0)
    assert more.time_s - p.time_s == pytest.approx(8e-6)
    assert predict("all_reduce", 8, Scale(1, 8), PRESETS["nvlink"], extra_us=5.0).time_s == \
        predict("all_reduce", 8, Scale(1, 8), PRESETS["nvlink"]).time_s  # no network hop


def test_roce_stretches_the_network_share_by_its_tail_and_ib_xdr_halves_the_bytes():
    roce = predict("all_reduce", GB, Scale(2, 8), PRESETS["roce"])
    assert roce.time_s == pytest.approx(predict("all_reduce", GB, Scale(2, 8),
                                                PRESETS["ib-ndr"]).time_s)
    assert roce.congested_s == pytest.approx(roce.time_s + 0.3 * roce.network_s)
    xdr = predict("all_reduce", GB, Scale(2, 8), PRESETS["ib-xdr"])
    assert xdr.time_s == pytest.approx((8.4 + 26 * 3.4 + 4 * 17) / 1e6 + GB * 2 * 15 / 16 / 100e9)


def test_a_custom_fabric_is_the_textbook_ring():
    """2 nodes of 4: 14 steps x 10 us + 1 MB x 14/8 / 10 GB/s = 140 + 175 us; 2 us more a
    network hop over its 2N = 4 network steps: 8 us."""
    fabric = whatif.custom(10.0, 10.0)
    p = predict("all_reduce", 1_000_000, Scale(2, 4), fabric)
    assert p.time_s == pytest.approx(315e-6)
    assert predict("all_reduce", 1_000_000, Scale(2, 4), fabric, 2.0).time_s == \
        pytest.approx(323e-6)
    with pytest.raises(ValueError, match="must be >= 0"):
        whatif.custom(-1.0, 10.0)


def test_what_the_model_has_no_model_of_and_what_it_refuses():
    assert predict("send", GB, Scale(2, 8), PRESETS["ib-ndr"]) is None
    assert predict("all_gather_object", GB, Scale(2, 8), PRESETS["ib-ndr"]) is None
    barrier = predict("barrier", 0, Scale(1, 8), PRESETS["nvlink"])
    assert barrier == predict("all_reduce", 4, Scale(1, 8), PRESETS["nvlink"])
    with pytest.raises(ValueError, match="joins the GPUs of one node"):
        predict("all_reduce", GB, Scale(2, 8), PRESETS["nvlink"])


def test_the_step_is_the_repeating_sequence_between_set_up_and_end():
    keys = ["bcast", "ar-big", "x", "y", "x", "y", "x", "y", "bcast"]
    starts = [0, 5, 10, 12, 110, 112, 210, 212, 300]
    step = whatif.infer_step(keys, starts)
    assert (step.pattern, step.repeats, step.first) == (("x", "y"), 3, 2)
    assert step.seconds == pytest.approx(100e-9)
    assert whatif.infer_step(["a", "b", "c"], [0, 1, 2]) is None
    chance = ["a", "b", "a", "b", "c", "d", "e", "f", "g"]  # 4 of 9 repeat: not a step
    assert whatif.infer_step(chance, range(9)) is None
    assert whatif.per_day(0.001, 0.1) == pytest.approx(864.0)


# ---- the command on a recording ------------------------------------------------------------

ALPHA_S, BETA = 50e-6, 1e9  # what the recorded times are made of
SIZES = (1_000_000, 65_536)
STEP_MS = 100


def _duration(op: str, size: int) -> int:
    c = costmodel.cost_of(op, "gloo", 2, size)
    return round((c.steps * ALPHA_S + c.sent / BETA) * 1e9)


def _recording(path, steps: int = 5, ops: bool = True):
    """Two gloo ranks: a broadcast, then ``steps`` steps of two all_reduces 100 ms apart, each
    op taking exactly what an alpha-beta model of gloo's schedule says."""
    calls = [("broadcast", SIZES[0], T0_NS)] if ops else []
    for k in range(steps if ops else 0):
        for j, size in enumerate(SIZES):
            calls.append(("all_reduce", size, T0_NS + 20_000_000 + k * STEP_MS * 1_000_000
                          + j * 10_000_000))
    batches = [op_batch(rank, [{"id": i + 1, "op": op, "seq": i + 1, "bytes_in": size,
                                "bytes_out": size, "t_start": t,
                                "t_end": t + _duration(op, size)}
                               for i, (op, size, t) in enumerate(calls)],
                        groups={0: ("0", (0, 1))}) for rank in range(2)]
    end = T0_NS + (steps + 1) * STEP_MS * 1_000_000
    rec = recording.Recorder(path)
    rec.write([*heartbeats(2), *(batches if calls else []), *(bye(r, end) for r in range(2))])
    rec.close({"t_ns": end})
    return path


def _whatif(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["whatif", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_whatif_prints_per_op_per_step_and_per_day_for_two_fabrics(tmp_path, capsys):
    path = str(_recording(tmp_path / "r.jsonl"))
    recorded_step_s = sum(_duration("all_reduce", s) for s in SIZES) / 1e9
    days = {}
    for fabric in ("ib-ndr", "roce"):
        code, out, err = _whatif(capsys, path, "--fabric", fabric, "--extra-latency-us", "1")
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].startswith("commviz whatif: a MODEL's prediction, not a measurement")
        assert "scale 16 nodes x 8 GPUs = 128" in lines[1]
        assert re.search(r"^all_reduce\s+2\s+1000000\s+5\s", out, re.M), out
        # the fit recovers the times it was made of: no error on the recording itself
        assert "alpha 50 us a step, beta 1 GB/s; its error on the recording's own 3 rows: " \
               "median 0%, largest 0%" in out, out
        assert "step: 100 ms, the recorded wall time per repetition of its most frequent " \
               "sequence of collectives (2 collectives, 5 repetitions" in out, out
        assert f"per step: recorded {recorded_step_s * 1e3:.4g} ms of collectives" in out, out
        day = re.search(r"^per day at the recorded rate \(864,000 steps\): recorded "
                        r"(\S+ \S+) of collectives; model (\S+ \S+)", out, re.M)
        assert day, out
        assert day.group(1) == f"{recorded_step_s * 864_000 / 60:.3g} min"
        days[fabric] = day.group(2)
        # the tree over 16 nodes: 8 network hops an all_reduce, two a step
        assert re.search(r"^\+1 us on every network hop \(model\): \+16 us a step, \+13\.8 s "
                         "a day", out, re.M), out
        # the seed article's point, in this job's numbers: 2 all_reduces x 8 tree hops
        assert out.splitlines()[-1] == (
            "why a microsecond matters: at scale the network sets the pace, and each step of "
            "this job crosses it 16 times (model) while every GPU waits; 864,000 steps a day "
            "make 1 us on every hop 13.8 s a day"), out
    assert "congested" not in days["ib-ndr"]
    code, out, _ = _whatif(capsys, path, "--fabric", "roce")
    per_day = next(line for line in out.splitlines() if line.startswith("per day"))
    assert per_day.endswith(" congested)"), out


def test_whatif_speaks_the_catalogues_languages(tmp_path, capsys):
    path = str(_recording(tmp_path / "r.jsonl"))
    code, out, _ = _whatif(capsys, path, "--fabric", "roce", "--lang", "pt")
    assert code == 0
    assert out.startswith("commviz whatif: a previsão de um MODELO, não uma medição"), out
    assert "por dia no ritmo gravado (864.000 passos): gravado 18,2 min de coletivas" in out
    assert "864.000 passos por dia fazem de 1 us em cada salto 13,8 s por dia" in out
    code, out, _ = _whatif(capsys, path, "--fabric", "ib-xdr", "--lang", "es")
    assert out.startswith("commviz whatif: la predicción de un MODELO, no una medición"), out
    assert "paso: 100 ms, el tiempo de reloj grabado por repetición" in out


def test_whatif_with_step_s_and_a_custom_fabric(tmp_path, capsys):
    path = str(_recording(tmp_path / "r.jsonl"))
    code, out, err = _whatif(capsys, path, "--alpha-us", "10", "--beta-gbps", "10",
                             "--nodes", "1", "--gpus-per-node", "2", "--step-s", "0.5")
    assert code == 0, err
    assert "custom: alpha 10 us a step on every hop, beta 10 GB/s" in out
    assert "step: 0.5 s, as --step-s gave it" in out
    assert "(172,800 steps)" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--fabric", "nvlink", "--nodes", "4"], "nvlink joins the GPUs of one node"),
    (["--extra-latency-us", "-1"], "a latency cannot be negative"),
    (["--alpha-us", "-3", "--beta-gbps", "10"], "the latency must be >= 0"),
    (["--alpha-us", "3"], "takes both --alpha-us and --beta-gbps"),
    (["--step-s", "0"], "a step lasts more than 0 seconds"),
])
def test_bad_options_get_one_sentence_and_exit_2(tmp_path, capsys, args, message):
    code, out, err = _whatif(capsys, str(_recording(tmp_path / "r.jsonl")), *args)
    assert (code, out) == (2, "")
    assert err.startswith("commviz: error: ") and message in err and err.count("\n") == 1, err


def test_an_unknown_fabric_a_missing_file_and_no_collectives_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["whatif", "x.jsonl", "--fabric", "token-ring"])
    assert exited.value.code == 2
    assert "invalid choice: 'token-ring'" in capsys.readouterr().err
    code, _, err = _whatif(capsys, str(tmp_path / "none.jsonl"))
    assert code == 2 and err == f"commviz: error: {tmp_path / 'none.jsonl'}: no such file\n"
    empty = str(_recording(tmp_path / "empty.jsonl", ops=False))
    code, _, err = _whatif(capsys, empty)
    assert (code, err) == (2, f"commviz: error: {empty} has no collectives: nothing to model\n")


@pytest.mark.integration
def test_whatif_on_a_recorded_ddp_run(procs, tmp_path):
    """A real DDP job on two gloo ranks: its gradient buckets repeat each iteration."""
    record = tmp_path / "ddp.jsonl"
    proc = procs.start("-m", "commviz", "demo", "ddp", "--ranks", "2", "--headless",
                       "--iters", "4", "--record", str(record))
    assert proc.finish(100) == 0, proc.stderr
    for fabric in ("ib-ndr", "ib-xdr"):
        out = procs.commviz("whatif", str(record), "--fabric", fabric,
                            "--extra-latency-us", "1")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("commviz whatif: a MODEL's prediction"), out.stdout
        assert re.search(r"^all_reduce\s+2\s", out.stdout, re.M), out.stdout
        assert re.search(r"^fit on the recording \(gloo.*its error on the recording's own "
                         r"\d+ rows: median \d+%", out.stdout, re.M), out.stdout
        assert re.search(r"^step: \S+ ms, the recorded wall time per repetition", out.stdout,
                         re.M), out.stdout
        assert re.search(r"^per step: recorded \S+ ms of collectives \(their times summed.*\); "
                         r"model \S+ ms$", out.stdout, re.M), out.stdout
        assert re.search(r"^per day at the recorded rate \([\d,]+ steps\): recorded .* model ",
                         out.stdout, re.M), out.stdout
        assert re.search(r"^\+1 us on every network hop \(model\): \+\S+ us a step",
                         out.stdout, re.M), out.stdout


def test_a_recording_cut_short_is_modelled_with_a_note(tmp_path, capsys):
    """As a killed viewer leaves it: its last line cut in the middle, as stats says."""
    whole = _recording(tmp_path / "r.jsonl").read_text(encoding="utf-8")
    cut = tmp_path / "cut.jsonl"
    cut.write_text(whole[: len(whole) - 40], encoding="utf-8")
    code, out, err = _whatif(capsys, str(cut))
    assert code == 0 and out.startswith("commviz whatif: a MODEL's prediction"), err
    assert err.startswith(f"commviz: note: {cut}:") and "cut short" in err, err
