"""The one checker of every fault scenario: the workload's record against the final histories.

Once the cluster serves every shard again and the writers stopped, every stream's whole
history is read through one node (``final``), and:

- **lost**: an acknowledged message (a producer's, or a plain append's) that is not there;
- **duplicated**: any message there more than once (a producer's seq, or a plain append,
  whatever its outcome: acknowledged, in doubt or refused);
- **reordered**: a producer's seqs not in increasing order;
- **phantom**: a message there that its writer never sent (a producer's seq past the one it
  was sending when it stopped);
- **forked reads**: a read whose messages are not those of the final history at its offset.
  Each read (stream, start offset, messages, next offset) is checked against the history read
  again from its start offset and from its next offset: the first must begin with the read's
  messages and continue with exactly the second (so nothing a reader was given later
  disappeared or changed, and its next offset is the same place in the history). Every read
  made from the fault on until the cluster served again (and 2 s after) is checked so, and
  a sample of the others. Each reader's reads of one chain, put end to end, must moreover be
  the history's beginning (a chain starts at offset -1): that covers every read.

``Row`` is the scenario's line of results.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from cluster_support import send
from workload import Message, Read, Workload, parse, session


@dataclass
class Row:
    """The scenario's results; ``counts`` has the rest: ``in_doubt`` plain appends (and
    ``in_doubt_stored``: of those, found), ``refused`` (and ``refused_stored``), ``reads``,
    ``reads_checked``, ``reads_in_fault``, ``acknowledged_in_fault`` (producers' appends)."""

    scenario: str
    acknowledged: int
    lost: int
    duplicated: int
    forked_reads: int
    seconds_to_serve_again: float
    reordered: int = 0
    phantom: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    failures: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds_to_fail_over: float | None = None
    """From the fault until the victim's shards were served by other nodes (``None``: they stayed its own)."""
    moves: tuple[str, ...] = ()
    """The shard moves from the fault on (``moves``)."""
    moves_between_healthy: int = 0

    def as_json(self) -> dict[str, object]:
        return {**vars(self), "counts": dict(self.counts)}


class History:
    """Every stream's history read through one node, and read again from any offset (cached)."""

    def __init__(self, node_url: str) -> None:
        self.node_url = node_url
        self.http = session()
        self._from: dict[tuple[str, str], tuple[Message, ...] | str] = {}

    def after(self, stream: str, offset: str) -> tuple[Message, ...] | str:
        """The messages after ``offset`` to the end; a string saying why not if the offset is refused."""
        key = (stream, offset)
        if key not in self._from:
            self._from[key] = self._read(stream, offset)
        return self._from[key]

    def forget(self, stream: str) -> None:
        """Read ``stream`` anew from now on."""
        self._from = {key: value for key, value in self._from.items() if key[0] != stream}

    def settled(self, stream: str, timeout_s: float = 30) -> tuple[Message, ...]:
        """The whole history once two reads 0.5 s apart agree (a request held up by the fault,
        a relay or a resumed process, may still land after the writers stopped)."""
        deadline = time.monotonic() + timeout_s
        last = self._read(stream, "-1")
        while True:
            assert not isinstance(last, str), last
            time.sleep(0.5)  # (settled is two reads 0.5 s apart agreeing: time is the measure)
            again = self._read(stream, "-1")
            if again == last or time.monotonic() > deadline:
                assert again == last, f"{stream}: still growing {timeout_s} s after the writers stopped"
                self._from[(stream, "-1")] = last
                return last
            last = again

    def _read(self, stream: str, offset: str) -> tuple[Message, ...] | str:
        messages: list[Message] = []
        url = f"{self.node_url}/v1/stream/{stream}"
        while True:
            answer = send("GET", url, http=self.http, params={"offset": offset}, timeout=30)
            if answer.status_code != 200:
                return f"GET {url}?offset={offset}: {answer.status_code} {answer.text[:200]}"
            messages += parse(answer.content)
            offset = answer.headers["Stream-Next-Offset"]
            if answer.headers.get("Stream-Up-To-Date") == "true":
                return tuple(messages)


def check(
    scenario: str,
    workload: Workload,
    node_url: str,
    *,
    fault: tuple[float, float],
    seconds_to_serve_again: float,
    sample: int = 200,
) -> Row:
    """The scenario's row (module docstring); ``fault``: (injected, served again) monotonic times."""
    history = History(node_url)
    final: dict[str, tuple[Message, ...]] = {}
    problems: list[str] = []
    for stream in workload.streams:
        final[stream] = history.settled(stream)
    counts = Counter(message for messages in final.values() for message in messages)
    row = Row(scenario, 0, 0, 0, 0, round(seconds_to_serve_again, 2), failures=workload.failures())

    for producer in workload.producers:
        seqs = [n for writer, n in final[producer.stream] if writer == producer.writer]
        acknowledged = set(producer.acknowledged)
        row.acknowledged += len(acknowledged)
        lost = sorted(acknowledged - set(seqs))
        duplicated = [n for n, count in Counter(seqs).items() if count > 1]
        sent = len(producer.acknowledged) + (1 if producer.in_flight is not None else 0)
        phantom = [n for n in seqs if n >= sent]
        reordered = sum(1 for first, second in itertools.pairwise(seqs) if second <= first)
        row.lost += len(lost)
        row.duplicated += len(duplicated)
        row.phantom += len(phantom)
        row.reordered += reordered
        if lost or duplicated or phantom or reordered:
            problems.append(
                f"producer {producer.writer} on {producer.stream}: lost {lost[:10]}, duplicated {duplicated[:10]}, "
                f"phantom {phantom[:10]}, {reordered} out of order; acknowledged 0..{len(producer.acknowledged) - 1}"
            )
    for appender in workload.appenders:
        for n, (stream, outcome) in appender.outcomes.items():
            count = counts[(appender.writer, n)]
            if outcome == "acknowledged":
                row.acknowledged += 1
                row.lost += count == 0
            elif outcome == "in_doubt":
                row.counts["in_doubt"] += 1
                row.counts["in_doubt_stored"] += count > 0
            else:
                row.counts["refused"] += 1
                row.counts["refused_stored"] += count > 0
            if count > 1 or (count == 0 and outcome == "acknowledged"):
                row.duplicated += count > 1
                problems.append(f"plain append {appender.writer}/{n} to {stream} ({outcome}): stored {count} times")
    producers = {producer.writer for producer in workload.producers}  # (their phantoms are counted above)
    appended = {(appender.writer, n) for appender in workload.appenders for n in appender.outcomes}
    strangers = [message for message in counts if message[0] not in producers and message not in appended]
    row.phantom += len(strangers)
    if strangers:
        problems.append(f"messages never sent: {strangers[:10]}")

    reads = list(workload.reads)
    row.counts["acknowledged_direct"] = sum(producer.direct for producer in workload.producers)
    row.counts["reads"] = len(reads)
    row.counts.update(f"reads_{read.reader.split('@')[0]}" for read in reads)
    injected, served = fault
    in_fault = [read for read in reads if injected <= read.at <= served + 2]
    row.counts["reads_in_fault"] = len(in_fault)
    others = [read for read in reads if not injected <= read.at <= served + 2]
    checked = in_fault + random.Random(0).sample(others, min(sample, len(others)))
    row.counts["reads_checked"] = len(checked)
    forked: set[Read] = set()
    for read in checked:
        why = _fork(history, read)
        if why:
            forked.add(read)
            problems.append(why)
    chains: dict[tuple[str, int], list[Read]] = {}
    for read in reads:
        chains.setdefault((read.reader, read.chain), []).append(read)
    for (reader, chain), chained in chains.items():
        position = 0
        whole = final[chained[0].stream]
        for read in chained:
            if whole[position : position + len(read.messages)] != read.messages:
                if read not in forked:
                    forked.add(read)
                    problems.append(
                        f"{reader} (chain {chain}) was given {read.messages[:5]}... at offset {read.start} "
                        f"(message {position} of its stream), the history has {whole[position : position + 5]}..."
                    )
                break
            position += len(read.messages)
    row.forked_reads = len(forked)
    row.problems = problems[:30]
    return row


def _fork(history: History, read: Read) -> str | None:
    """Why ``read`` is not a slice of the final history at its offset (``None``: it is). A
    disagreement is looked at again once the history settled again: an append in doubt (a
    request held up by the fault, its packets retransmitted after a heal) may land after
    ``History.settled``, between the two reads compared."""
    why = _disagreement(history, read)
    if why is not None:
        history.forget(read.stream)
        history.settled(read.stream)
        why = _disagreement(history, read)
    return why


def _disagreement(history: History, read: Read) -> str | None:
    at_start, at_next = history.after(read.stream, read.start), history.after(read.stream, read.next)
    if isinstance(at_start, str) or isinstance(at_next, str):
        refused = at_start if isinstance(at_start, str) else at_next
        return f"{read.reader} read at {read.start}..{read.next}, now refused: {refused}"
    count = len(read.messages)
    if at_start[:count] != read.messages:
        return f"{read.reader} was given {read.messages[:5]}... at {read.start}; the history has {at_start[:5]}..."
    after = at_start[count:]
    if after != at_next:
        differs = next((n for n, pair in enumerate(zip(after, at_next, strict=False)) if pair[0] != pair[1]), None)
        return (
            f"{read.reader} was told {read.next} follows {read.start} +{count} messages; the history has "
            f"{len(after)} after them, a read from {read.next} {len(at_next)}, first differing at {differs}"
        )
    return None
