"""What transfers and all_to_all moved between nodes (viewer/node_traffic) and the topology
view's node-by-node heatmap of it (tui/topology.node_heatmap), without an app."""

from __future__ import annotations

import numpy as np

from commviz.tui.topology import NodeMap, node_heatmap, render_topology, shows_nodes
from commviz.viewer.model import Instance
from commviz.viewer.node_traffic import NodeTraffic

NODES = {f"node{k:03d}": list(range(8 * k, 8 * k + 8)) for k in range(16)}  # 128 ranks


def inst(op: str, group: tuple[int, ...], size: int) -> Instance:
    return Instance(op, group, 1, size, 0, 0, 1, None, None)


def placed() -> NodeTraffic:
    traffic = NodeTraffic()
    traffic.place(NODES)
    return traffic


def test_a_transfer_counts_from_its_senders_node_to_its_receivers():
    traffic = placed()
    traffic.add([inst("isend", (3, 40), 1000), inst("send", (3, 41), 500),
                 inst("irecv", (41, 3), 7), inst("isend", (4, 5), 9),  # within node000
                 inst("all_reduce", tuple(range(128)), 10**9),  # not shown here
                 inst("isend", (3, 999), 10**9)])  # a rank of no known host: left out
    m = traffic.matrix(list(NODES))
    assert (m[0, 5], m[5, 0], m[0, 0]) == (1500, 7, 9)
    assert traffic.total == m.sum() == 1516
    assert [tuple(p) for p in traffic.busiest(5)] == [("node000", "node005", 1500),
                                                      ("node005", "node000", 7)]


def test_an_all_to_all_sends_each_member_its_part():
    """4 ranks on 2 nodes, S = 400 B a rank: each sends 100 B to each member, nothing to
    itself: 2 x 2 x 100 each way between the nodes, 2 x 1 x 100 within each."""
    traffic = placed()
    group = (0, 1, 8, 9)
    traffic.add([inst("all_to_all_single", group, 400)] * 3)
    m = traffic.matrix(["node000", "node001"])
    assert m.tolist() == [[600, 1200], [1200, 600]]
    assert traffic.total == 3 * 4 * 300


def test_a_host_seen_later_keeps_what_was_counted():
    traffic = placed()
    traffic.add([inst("isend", (0, 8), 10)])
    traffic.place({**NODES, "node016": [128]})
    traffic.add([inst("isend", (128, 0), 5)])
    order = ["node016", *NODES]
    m = traffic.matrix(order)
    assert (m[1, 2], m[0, 1], m.sum()) == (10, 5, 15)


def node_map(traffic: NodeTraffic) -> NodeMap:
    order = list(traffic.hosts)
    return NodeMap(order, {r: i for i, h in enumerate(order) for r in NODES.get(h, [])},
                   traffic.matrix(order), traffic.busiest(5))


def pipeline_traffic() -> NodeTraffic:
    """Two stages of 64 ranks: each rank sends to its peer 8 nodes on, and back."""
    traffic = placed()
    traffic.add([inst("isend", (r, r + 64), 2 << 20) for r in range(64)]
                + [inst("isend", (r + 64, r), 1 << 20) for r in range(64)])
    return traffic


def test_the_node_heatmap_shades_the_busy_cells_and_names_the_busiest_pairs():
    nodes = node_map(pipeline_traffic())
    lines = [t.plain for t in node_heatmap(nodes, None, 80, 20, True)]
    assert lines[0].startswith("bytes between nodes, row → column")
    assert "busiest node pairs:" in lines[2]
    assert "node000 → node008: 16.0 MiB" in lines[3]
    rows = lines[2:18]  # 16 nodes, one a row, cells two columns wide
    for k, row in enumerate(rows):
        cells = row[4:4 + 32]
        busy = {c // 2 for c, ch in enumerate(cells) if ch != " "}
        assert busy == {(k + 8) % 16}, (k, row)
    assert rows[0][4 + 16] == "█" and rows[8][4] in "░▒▓"  # half the bytes back
    narrow = [t.plain for t in node_heatmap(nodes, None, 40, 24, True)]
    assert narrow[-6].startswith("busiest node pairs:")  # under the matrix, not beside


def test_the_node_heatmap_takes_over_only_where_ranks_do_not_fit():
    nodes = node_map(pipeline_traffic())
    assert shows_nodes(128, None, nodes, 94, 10)
    assert not shows_nodes(128, None, nodes, 300, 200)  # a cell a rank: today's heatmap
    assert not shows_nodes(128, None, node_map(placed()), 94, 10)  # nothing moved
    lines = render_topology(128, None, 94, 14, nodes=nodes)
    assert any("busiest node pairs" in t.plain for t in lines)
    assert not any("busiest" in t.plain for t in render_topology(128, None, 94, 14))
    assert len(lines) == 14 and all(t.cell_len == 94 for t in lines)


def test_busiest_pairs_leave_out_what_stays_within_a_node():
    traffic = placed()
    traffic.add([inst("isend", (0, 1), 10**6), inst("isend", (0, 9), 1)])
    assert [p.nbytes for p in traffic.busiest(3)] == [1]
    assert np.isclose(traffic.matrix(["node000"])[0, 0], 10**6)
