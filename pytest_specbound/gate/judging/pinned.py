"""A class pinned at an accept length (``pin_accept``): the measured accept held against the
pin. Within :data:`PIN_TOLERANCE` the verdict says the system was judged at the pin, without
the drafter's noise; further off, the server did not run pinned (attached without the setting,
a drafter that proposed too few tokens, an engine that ignores it) and the class fails."""

from __future__ import annotations

from pytest_specbound.gate.verdicts.evaluate import Context, Evaluation
from pytest_specbound.measure.sequential import Side

PIN_TOLERANCE = 0.1  # accept length: a pinned engine's realised mean over a class's requests


def pin_check(c: Context, pin: float, drafter_classes: tuple[str, ...] = ()) -> Evaluation:
    """The measured accept against ``pin`` (judged once sampling has ended);
    ``drafter_classes``: the budget's classes that judge the drafter's band."""
    accept = c.f.accept
    if not c.final:
        return Evaluation(Side.OK)
    if abs(accept - pin) <= PIN_TOLERANCE:
        where = (f"its band is judged in {', '.join(drafter_classes)}" if drafter_classes else
                 "no class of this budget judges its band (give one without pin_accept an "
                 "accept band)")
        return Evaluation(Side.OK, notes=(
            f"pinned: accept {accept:.2f} at the engine's synthetic acceptance of {pin:g}: the "
            f"system judged without the drafter's noise; the drafter is not judged here, {where}",
        ), codes=("pinned",))
    return Evaluation(Side.BAD, "system", "not_pinned", (
        f"accept {accept:.2f} is not the pinned {pin:g} (within {PIN_TOLERANCE:g}): the server "
        "did not run at the pinned acceptance (attached by url without the setting, a drafter "
        "that proposed fewer tokens than the pin accepts, as an n-gram lookup without matches "
        "does, or an engine that ignores it); its efficiency is not the system's at the pin",))
