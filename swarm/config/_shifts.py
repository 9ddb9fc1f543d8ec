"""How a simulated provider changes under a run: `Shift`, a ground type because
`[[providers.NAME.shifts]]` of a `kind = "sim"` provider holds a list of them
(`swarm.config`), and the simulator and `swarm simulate --shift` read them.

A shift starts at a simulated time (`at_s`, seconds since the provider's first call) or
at a call (`at_call`, counting from 1) and lasts until the next one: `speed` multiplies
the decode rate and divides the time to first token (0.2: five times slower), and
`error_rate`, when set, fails that share of calls with HTTP 500.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Shift", "parse_shift"]


class Shift(BaseModel):
    """From `at_s` (or `at_call`) on, the provider runs at `speed` and fails `error_rate`."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    at_s: float | None = Field(default=None, ge=0)
    at_call: int | None = Field(default=None, ge=1)
    speed: float = Field(default=1.0, gt=0)
    error_rate: float | None = Field(default=None, ge=0, le=1)

    @model_validator(mode="after")
    def _one_start(self) -> Shift:
        if (self.at_s is None) == (self.at_call is None):
            raise ValueError("a shift needs exactly one of at_s and at_call")
        return self

    def started(self, elapsed_s: float, call: int) -> bool:
        if self.at_call is not None:
            return call >= self.at_call
        return elapsed_s >= (self.at_s or 0.0)


def parse_shift(text: str) -> tuple[str | None, Shift]:
    """`[PROVIDER:]at_s=60,speed=0.2[,error_rate=0.5]` (or `at_call=N`) → (provider, shift);
    raises ValueError naming the bad part."""
    provider, sep, rest = text.rpartition(":")
    fields: dict[str, float] = {}
    for part in rest.split(","):
        key, eq, value = part.partition("=")
        if not eq or key.strip() not in Shift.model_fields:
            raise ValueError(f"{part!r}: expected at_s=, at_call=, speed= or error_rate=")
        try:
            fields[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"{part!r}: {value!r} is not a number") from None
    if "at_call" in fields:
        fields["at_call"] = int(fields["at_call"])
    return (provider or None) if sep else None, Shift.model_validate(fields)
