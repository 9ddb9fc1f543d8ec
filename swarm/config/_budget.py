"""`[budget]` and a task's `budget:` as a config section: the limits of one scope.

`swarm.budget` enforces them; they live here because the config holds them and the budget
sits above the config (it needs the model seam)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swarm.config._duration import parse_duration

__all__ = ["BudgetLimits"]


class BudgetLimits(BaseModel):
    """Limits for one scope; None means no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    usd: float | None = Field(default=None, gt=0)
    """Money spent on model calls, from the catalog's prices."""
    tokens: int | None = Field(default=None, gt=0)
    """Input plus output tokens."""
    steps: int | None = Field(default=None, gt=0)
    """Model calls."""
    deadline: float | None = Field(default=None, gt=0)
    """Seconds from the start of the run (`"15m"`, `"1h30m"` or a number)."""

    @field_validator("deadline", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, str):
            return parse_duration(value)
        return value

    def over(self, override: BudgetLimits | None) -> BudgetLimits:
        """These limits with every limit `override` sets taking precedence."""
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_none=True))

    @property
    def unlimited(self) -> bool:
        """Whether no limit is set."""
        return all(v is None for v in self.model_dump().values())
