"""A node's black box (``commviz run --no-viewer``): what its dying ranks had not sent, and
the last of what its relay could not forward, kept in a recording on the node.

There the viewer is another process, on another host perhaps, and what kills a job may take
it down too (an OOM killer, a scheduler ending the allocation), or it was never started. The
node's harvester hands this box each dead process' messages (its identity, the groups its
records name, its last batches and the ops it was inside, flagged recovered, and how it
ended); at the end, the relay hands it the last messages it dropped, the viewer being gone.
They are decoded and written as a viewer records them, each once: the harvester's messages
go to the viewer through the relay too (a message the relay dropped is in the box already),
and a numbered batch once (the harvester sends a dead process' last batches again, the relay
may have dropped the first copies). At the end, what a diagnosis of them alone finds (which
rank ended first, and how, and where the others were), so that ``commviz play`` and
``commviz stats`` read the file and say so. Nothing is written while no rank dies with
records unsent and the relay drops none.
"""

from __future__ import annotations

import hashlib
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
    """``keep`` (the harvester's, on its thread) and ``keep_unforwarded`` (the relay's, at
    the end) write; ``close`` ends the file. In ``directory`` (default: the temporary
    directory), named after the host and this process."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory or tempfile.gettempdir())
        self.host = nodes.hostname()
        self.path: Path | None = None  # made at the first death with records to keep
        self.ranks: set[int] = set()  # whose ends it holds
        self.rejected = 0  # messages that did not decode (none are expected: the harvester's)
        self.unforwarded = 0  # messages of the relay's kept
        self.error: str | None = None  # why the file could not be written
        self._batches: set[tuple[int, int, int]] = set()  # (rank, inc, n) of those written
        self._digests: set[bytes] = set()  # of the messages written
        self._recorder: recording.Recorder | None = None
        self._tables = GroupTables(self._reject)
        self._model = Model()
        self._diagnosis = Diagnosis(self._model)
        self._lock = threading.Lock()

    def _reject(self, _reason: str, n: int) -> None:
        self.rejected += n

    def keep(self, messages: list[bytes]) -> None:
        """A dead process' messages (the harvester's thread)."""
        with self._lock:
            self._write(messages)

    def keep_unforwarded(self, messages: list[bytes]) -> None:
        """The last messages the relay could not send (at the end)."""
        with self._lock:
            self.unforwarded += self._write(messages)

    def _write(self, messages: list[bytes]) -> int:
        """Decode and record ``messages``, each numbered batch once; how many were new."""
        decoded = []
        for data in messages:
            digest = hashlib.blake2b(data, digest_size=16).digest()
            if digest in self._digests:
                continue
            self._digests.add(digest)
            try:
                msg = protocol.decode(data)
            except protocol.ProtocolError:
                self.rejected += 1
                continue
            if type(msg) is protocol.OpBatch and msg.n:
                if (msg.rank, msg.inc, msg.n) in self._batches:
                    continue
                self._batches.add((msg.rank, msg.inc, msg.n))
            decoded.append(msg)
        if decoded and self.error is None:
            if self._recorder is None:
                host = re.sub(r"[^\w.-]", "_", self.host)  # (COMMVIZ_HOST may say anything)
                self.path = self.directory / f"commviz-blackbox-{host}-{os.getpid()}.jsonl"
                try:
                    self._recorder = recording.Recorder(self.path, {
                        "host": self.host, "title": {
                            lang: i18n.ui("black box title", lang).format(host=self.host)
                            for lang in i18n.LANGS}})
                except OSError as exc:  # said once, at the end; the job goes on
                    self.error = f"{self.path}: {exc.strerror or exc}"
                    return 0
            resolved = self._tables.resolve(decoded)
            self._model.apply(resolved)
            self._recorder.write(resolved)
            self.ranks.update(m.rank for m in decoded if isinstance(m, protocol.Gone))
        return len(decoded)

    def close(self) -> str | None:
        """End the file; the line that says where it is (None: nothing was kept)."""
        with self._lock:
            if self.error is not None:
                return f"commviz: the node's black box could not be written ({self.error})"
            if self._recorder is None:
                return None
            ended = sorted(self.ranks)
            self._recorder.write_findings(self._diagnosis.update()
                                          + self._diagnosis.finish(ended))
            self._recorder.close({"ended": ended})
            self._recorder = None
        ranks, said = sorted(self.ranks), []
        if ranks:
            who = f"rank {ranks[0]}" if len(ranks) == 1 else \
                f"ranks {', '.join(map(str, ranks))}"
            said.append(f"what {who} had not sent when their processes ended")
        if self.unforwarded:
            said.append(f"the last {self.unforwarded:,} messages the relay could not forward "
                        "to the viewer")
        return (f"commviz: {' and '.join(said)}: kept in {self.path} (commviz play or commviz "
                "stats read it)")
