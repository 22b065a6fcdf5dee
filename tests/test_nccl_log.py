"""Reading NCCL's INFO lines (tests/data/nccl/, see its README for where the lines come from)."""

from pathlib import Path

import pytest

from commviz.knowledge.nccl_log import UNKNOWN_NO_LOG, UNKNOWN_NO_TUNING, NcclLog, transport_kind

DATA = Path(__file__).parent / "data" / "nccl"


def _read(*names: str) -> NcclLog:
    log = NcclLog()
    for name in names:
        for line in (DATA / name).read_text(encoding="utf-8", errors="replace").splitlines():
            log.feed(line)
    return log


def test_knowledge_lines():
    log = _read("knowledge.log")
    assert log.lines == 5
    # the TUNING line has no call before it on its thread to say the group's size
    c = log.choice("all_gather_into_tensor", 4 * 1048576, 4)
    assert c is not None and c.label() == "Ring/Simple" and c.nranks is None
    assert c.channels == (0, 1)
    comm = log.procs[("gpu-a", 4001)].pending[4060]  # no communicator named yet
    assert comm.neighbours == {0: (3, 1)}
    assert log.procs[("gpu-a", 4001)].pending[4001].rings == {0: (0, 1, 2, 3)}
    # the COLL line alone says nothing about the algorithm
    assert log.choice("all_reduce", 262144 * 4, 4) is None


def test_two_gpus_init_and_choices():
    log = _read("two_gpus.log")
    assert log.version == "2.21.5+cuda12.4"
    procs = {k: p for k, p in log.procs.items()}
    assert set(procs) == {("node7", 81234), ("node7", 81235)}
    comm = procs[("node7", 81234)].comms["0x55c1a2b3c4d0"]
    assert (comm.rank, comm.nranks, comm.nodes, comm.local_ranks) == (0, 2, 1, 2)
    assert comm.complete and comm.comm_id == "0x7d3c2a1b9e8f6a01" and comm.coll_channels == 2
    assert comm.rings == {0: (0, 1), 1: (0, 1)}
    assert comm.trees == {0: (-1, (1,)), 1: (-1, (1,))}
    assert procs[("node7", 81235)].comms["0x5600f1e2d3c0"].trees[0] == (0, ())
    assert procs[("node7", 81234)].network == "Socket"
    # 1M float32 all_reduce: 4 MiB, paired with its COLL line (count, dtype, group size)
    c = log.choice("all_reduce", 4194304, 2)
    assert (c.label(), c.nranks, c.count, c.datatype) == ("Ring/Simple", 2, 1048576, "float32")
    text = log.algorithm_text("all_reduce", 4194304, 2)
    assert text == "algorithm: Ring/Simple (from NCCL's log)"
    assert log.choice("all_reduce", 4096, 2).label() == "Tree/LL128"
    # all_gather: S is the whole output, NCCL counts one rank's part
    assert log.choice("all_gather_into_tensor", 1024, 2).label() == "Ring/LL"
    assert log.choice("all_gather", 1024, 4) is None  # another group size: not this choice
    assert log.algorithm_text("all_reduce", 8, 2) == UNKNOWN_NO_TUNING
    assert [c.function for c in log.ops] == ["AllReduce", "AllGather", "AllReduce"]


def test_links_in_global_ranks():
    log = _read("two_gpus.log")
    # global ranks as the heartbeats say: here torchrun's rank 1 is the first process
    links = log.links({("node7", 81234): 1, ("node7", 81235): 0})
    assert set(links) == {(1, 0), (0, 1)}
    assert links[(1, 0)].kind == "P2P/CUMEM" and links[(1, 0)].channels == 2
    # processes the viewer does not know are not placed
    assert log.links({("node7", 81234): 0}) == {}


def test_two_nodes_transports():
    log = _read("two_nodes_ib.log")
    ranks = {("hostA", 5101): 0, ("hostA", 5102): 1, ("hostB", 7301): 2, ("hostB", 7302): 3}
    links = log.links(ranks)
    assert {k: v.kind for k, v in links.items()} == {
        (3, 0): "NET/IB", (0, 1): "P2P/IPC", (1, 2): "NET/IB", (2, 3): "SHM"}
    assert links[(2, 3)].detail == "SHM/direct/direct" and links[(2, 3)].channels == 2
    # TUNING lines that name their communicator: its size comes from the init lines
    c = log.choice("reduce_scatter_tensor", 4 * 2097152, 4)
    assert c is not None and c.label() == "Ring/Simple" and c.nranks == 4
    assert log.choice("broadcast", 64, 4).label() == "Ring/LL"
    summary = log.init_summary()
    assert summary == ("NCCL 2.23.4+cuda12.6; 4 ranks on 2 node(s); 2 channels; "
                       "ring 0 > 1 > 2 > 3; transports NET/IB, P2P/IPC, SHM; network IB")


def test_init_summary_waits_for_every_rank():
    lines = (DATA / "two_gpus.log").read_text().splitlines()
    log = NcclLog()
    first_complete = next(i for i, ln in enumerate(lines) if "Init COMPLETE" in ln)
    for line in lines[:first_complete + 1]:
        log.feed(line)
    assert log.init_summary() is None  # rank 1 has not completed yet
    assert log.init_summary(final=True).startswith("NCCL 2.21.5+cuda12.4; 2 ranks")
    log.feed(lines[first_complete + 1])
    assert log.init_summary() == ("NCCL 2.21.5+cuda12.4; 2 ranks on 1 node(s); 2 channels; "
                                  "ring 0 > 1; transports P2P/CUMEM; network Socket")


def test_old_nccl_numbers_and_no_guess():
    log = _read("old_nccl.log")
    assert log.version == "2.7.8+cuda11.0"
    # "Ring 00 : a[busId] -> b[busId] via ..." is a connection, not a ring order
    links = log.links({("oldbox", 3300): 0, ("oldbox", 3301): 1})  # no commId: world comm
    assert {k: v.detail for k, v in links.items()} == {(0, 1): "P2P/IPC", (1, 0): "P2P/IPC"}
    assert log.procs[("oldbox", 3300)].comms["0x7f1c2c001000"].rings == {0: (0, 1)}
    # numbered algorithm and protocol, named by the Broadcast call before it on its thread
    c = log.choice("broadcast", 262144, 2)
    assert (c.label(), c.count, c.datatype) == ("Ring/Simple", 65536, "float32")
    # the second line has no call to name its op: kept nowhere rather than guessed
    assert len(log.ops) == 1
    assert log.choice("all_reduce", 1024, 2) is None


def test_without_nccl_lines_the_algorithm_is_unknown():
    log = NcclLog()
    for line in ("step 0 loss 2.3", "NCCL is great", ""):
        assert not log.feed(line)
    assert not log.seen()
    assert log.algorithm_text("all_reduce", 4096, 2) == UNKNOWN_NO_LOG
    assert log.init_summary() is None and log.init_summary(final=True) is None
    assert log.links({("h", 1): 0}) == {}


def test_garbled_lines_never_break_it():
    log = _read("garbled.log")
    assert log.version is None and log.choice("all_reduce", 12, 1) is None
    assert all(not c.links for p in log.procs.values() for c in p.comms.values())
    # a well-formed line with names NCCL may add later is kept as printed, not mapped
    assert log.choice("reduce_scatter", 2, 2).label() == "algo WEIRD/proto NEW"
    log.init_summary(final=True)
    assert log.algorithm_text("all_to_all", 8, 2).startswith("algorithm unknown")


@pytest.mark.parametrize("via, kind", [
    ("P2P/IPC/read", "P2P/IPC"), ("P2P/CUMEM", "P2P/CUMEM"), ("P2P/direct pointer", "P2P/direct"),
    ("SHM/direct/direct", "SHM"), ("NET/IB/0/GDRDMA", "NET/IB"), ("NET/Socket/3", "NET/Socket")])
def test_transport_kind(via, kind):
    assert transport_kind(via) == kind


def test_the_fabric_from_nccls_own_words():
    """InfiniBand or RoCE per NIC (their link-layer tag: both are NCCL's IB transport),
    GPUDirect RDMA, PXN, sockets, and a job within one node, as the views word them."""
    from commviz.viewer.plain_text import fabric_line

    ib = _read("two_nodes_ib.log").fabric()
    assert (ib.inter, ib.intra, ib.gdr, ib.pxn) == (("NET/IB",), ("P2P/IPC", "SHM"), True, False)
    assert ib.layers() == {"IB": ["mlx5_0", "mlx5_1"]}
    assert fabric_line(ib) == ("inter-node: InfiniBand (mlx5_0, mlx5_1) · GPUDirect RDMA · "
                               "NET/IB · intra-node: P2P/IPC, SHM")
    roce = _read("two_nodes_roce_pxn.log").fabric()
    assert roce.layers() == {"RoCE": ["mlx5_10", "mlx5_11"]} and roce.gdr and roce.pxn
    assert fabric_line(roce) == ("inter-node: RoCE (mlx5_10, mlx5_11) · GPUDirect RDMA · "
                                 "PXN (through a node-mate's NIC) · NET/IB · "
                                 "intra-node: P2P/CUMEM")
    assert fabric_line(roce, "pt").startswith("entre nós: RoCE (mlx5_10, mlx5_11)")
    sock = _read("two_nodes_socket.log").fabric()
    assert (sock.inter, sock.gdr, sock.pxn) == (("NET/Socket",), False, False)
    assert fabric_line(sock) == "inter-node: TCP (eth0, eth1) · NET/Socket · intra-node: SHM"
    one = _read("two_gpus.log").fabric()
    assert fabric_line(one, "es") == "ninguna conexión entre nodos · dentro del nodo: P2P/CUMEM"
    # without NCCL's lines: how to get them, never a guess
    assert _read("garbled.log").fabric() is None
    assert fabric_line(None) == ("not in NCCL's log (run with NCCL_DEBUG=INFO to see its "
                                 "transports and NICs)")
