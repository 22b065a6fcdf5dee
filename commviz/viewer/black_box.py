"""A node's black box (``commviz run --no-viewer``): what its dying ranks had not sent, kept
in a recording on the node beside being sent on to the viewer.

There the viewer is another process, on another host perhaps, and what kills a job may take
it down too (an OOM killer, a scheduler ending the allocation), or it was never started. The
node's harvester hands this box each dead process' messages (its identity, the groups its
records name, its last batches and the ops it was inside, flagged recovered, and how it
ended); they are decoded and written as a viewer records them, with what a diagnosis of
them alone finds at the end (which rank ended first, and how, and where the others were), so
``commviz play`` and ``commviz stats`` read the file and say so. Nothing is written while no
rank dies with records unsent.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from pathlib import Path

from commviz.text import i18n
from commviz.viewer import recording
from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.groups import GroupTables
from commviz.viewer.model import Model
from commviz.wire import nodes, protocol


class BlackBox:
    """``keep`` (the harvester's, on its thread) writes; ``close`` ends the file. In
    ``directory`` (default: the temporary directory), named after the host and this
    process."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory or tempfile.gettempdir())
        self.host = nodes.hostname()
        self.path: Path | None = None  # made at the first death with records to keep
        self.ranks: set[int] = set()  # whose ends it holds
        self.rejected = 0  # messages that did not decode (none are expected: the harvester's)
        self._recorder: recording.Recorder | None = None
        self._tables = GroupTables(self._reject)
        self._model = Model()
        self._diagnosis = Diagnosis(self._model)
        self._lock = threading.Lock()

    def _reject(self, _reason: str, n: int) -> None:
        self.rejected += n

    def keep(self, messages: list[bytes]) -> None:
        decoded = []
        for data in messages:
            try:
                decoded.append(protocol.decode(data))
            except protocol.ProtocolError:
                self.rejected += 1
        with self._lock:
            if self._recorder is None:
                host = re.sub(r"[^\w.-]", "_", self.host)  # (COMMVIZ_HOST may say anything)
                self.path = self.directory / f"commviz-deaths-{host}-{os.getpid()}.jsonl"
                self._recorder = recording.Recorder(self.path, {"host": self.host, "title": {
                    lang: i18n.ui("black box title", lang).format(host=self.host)
                    for lang in i18n.LANGS}})
            resolved = self._tables.resolve(decoded)
            self._model.apply(resolved)
            self._recorder.write(resolved)
            self.ranks.update(m.rank for m in decoded if isinstance(m, protocol.Gone))

    def close(self) -> str | None:
        """End the file; the line that says where it is (None: nothing was kept)."""
        with self._lock:
            if self._recorder is None:
                return None
            ended = sorted(self.ranks)
            self._recorder.write_findings(self._diagnosis.update()
                                          + self._diagnosis.finish(ended))
            self._recorder.close({"ended": ended})
            self._recorder = None
        ranks = sorted(self.ranks)
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        return (f"commviz: what {who} had not sent when their processes ended is kept in "
                f"{self.path} too (commviz play or commviz stats read it)")
