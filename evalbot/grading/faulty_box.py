"""A contradiction on a box that showed faults is not called a lie. Pure; table-tested.

The fault screen (engine/contract/shared/faults.py) drops a pair whose sample is far slower than its
side's fastest. It cannot see a fault that struck every sample of one side: then that side's
fastest is a faulted one too. Where main's first test ran slow in each of its processes, main's
printed rate is low in every pair, the head's looks faster by the fault's size, and the
harness's witness, whose processes the fault missed, shows no saving: the witness contradicts
the cell, which would make an A/A `spoofed`, a REJECT that accuses the contributor of a box's
fault (tests/test_fault_screen.py: main's 5 first tests slow and none of the head's, about 1
A/A in 1,000 under the "slow first" stress).

So where the screen dropped a pair anywhere in the evaluation, a witness's contradiction makes
the cell `unconfirmed` (confirmation FAULTY_BOX: no tier, the headline `eval:inconclusive`),
not `spoofed`. A head can buy that only by running slow itself, which the screen believes a box
fault once; it still gets no tier, and on a clean box a lie stays a REJECT.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FAULTY_BOX = "contradicted on a box that showed faults"
FAULTY_BOX_REASON = ("the harness's clock does not show the saving the engine printed; the box "
                     "showed faults in this evaluation, so the rates are not called a lie; "
                     "not believed")


def not_called_lies(results: Mapping[str, Any], cells: list[dict[str, Any]]) -> None:
    """Graded cells (in place): `spoofed` ones become unconfirmed (FAULTY_BOX) where the fault
    screen dropped a sample somewhere in the evaluation."""
    if not any(s.get("fault") for c in results["cells"] for s in c["samples"]):
        return
    for cell in cells:
        if cell["decision"] == "spoofed":
            cell.update(decision="unconfirmed", tier=None, confirmation=FAULTY_BOX)
