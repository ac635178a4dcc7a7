"""A source a test opens step by step: :class:`Gated` (for tests that act on a flow at chosen points).

Threading: the source runs on a worker of the run; the test's thread opens the gates.
"""

from __future__ import annotations

import threading

import elastream as es


class Gated(es.Operator):
    """A source of 0..n-1, in pushes of ``chunk``, that waits before each gate's position until the test opens it.

    It waits through the scheduler's poller (``wait_external``), holding no worker, so the rest
    of the flow drains meanwhile.

    Example: ``flow.source(Gated(100, {50: gate}))`` stops after 0..49 until ``gate.set()``.
    """

    def __init__(self, n: int, gates: dict[int, threading.Event], chunk: int = 8):
        super().__init__(inputs=0, outputs=1)
        self.n, self.gates, self.chunk = n, gates, chunk

    async def process(self, ctx) -> None:
        cuts = sorted(g for g in self.gates if 0 <= g < self.n) + [self.n]
        start = 0
        for cut in cuts:
            for i in range(start, cut, self.chunk):
                await ctx.outputs[0].push_many(range(i, min(i + self.chunk, cut)))
            if cut < self.n:
                await ctx.wait_external(self.gates[cut].is_set)
            start = cut
