"""The simulator's fault rates: `Faults` (and `RealModel`, how its replies go wrong as a
real open model's do), a ground type because `[providers.NAME.faults]`
of a `kind = "sim"` provider holds one (`swarm.config`), and the simulator, `swarm simulate`
and `swarm sim serve` all read it. The rates are validated here (each in [0, 1], their sum
at most 1), so a bad rate fails where it is written, naming the key or flag.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["TEXT_FORMATS", "Faults", "RealModel"]

_Rate = Field(default=0.0, ge=0.0, le=1.0)


class Faults(BaseModel):
    """How often simulated calls fail, and how (`[providers.NAME.faults]` of a `kind = "sim"`
    provider, the fault options of `swarm simulate` and `swarm sim serve`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    error_rate: float = _Rate
    """Share of calls answered with HTTP 500."""
    rate_limit_rate: float = _Rate
    """Share of calls answered with 429 (random: no quota behind them)."""
    retry_after_s: float = Field(default=1.0, ge=-1e6, le=1e6)
    """The Retry-After a random 429 carries (0 or negative, as hostile servers send)."""
    drop_rate: float = _Rate
    """Share of calls whose connection drops mid-stream."""
    stall_rate: float = _Rate
    """Share of calls whose stream stops mid-way and never resumes."""
    malformed_rate: float = _Rate
    """Share of calls that receive a garbage chunk."""
    hang_rate: float = _Rate
    """Share of calls that never send a first token (held until the client gives up)."""
    refuse_rate: float = _Rate
    """Share of calls whose connection is refused at once (a dead endpoint at 1.0)."""
    quota_tpm: int | None = Field(default=None, ge=1)
    """Provider-side tokens/min quota (input + output + thinking, charged at admission);
    a call that would overdraw it gets a 429 whose Retry-After is the refill time."""
    quota_rpm: int | None = Field(default=None, ge=1)
    """Provider-side requests/min quota."""
    quota_headers: bool = True
    """Whether successful calls report the quota left (`x-ratelimit-*`); some providers
    send none, leaving clients only the 429s."""

    @model_validator(mode="after")
    def _rates_add_up(self) -> Faults:
        if self.total_rate > 1.0 + 1e-9:
            raise ValueError(f"fault rates add up to {self.total_rate:g}, more than 1")
        return self

    @property
    def total_rate(self) -> float:
        """The share of calls that meet some random fault (the rates summed; at most 1)."""
        return (
            self.error_rate
            + self.rate_limit_rate
            + self.drop_rate
            + self.stall_rate
            + self.malformed_rate
            + self.hang_rate
            + self.refuse_rate
        )


TEXT_FORMATS = ("hermes", "fenced", "bare", "llama3", "mistral", "function", "pythonic")
"""The ways the mode writes a call as text."""


class RealModel(BaseModel):
    """How often a simulated reply goes wrong as a real open model's does."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    text_calls: float = Field(default=0.7, ge=0.0, le=1.0)
    """Share of replies whose calls are written as text, not in `tool_calls`."""
    formats: list[str] = Field(default_factory=lambda: list(TEXT_FORMATS), min_length=1)
    """The text formats drawn from (`hermes`, `fenced`, `bare`, `llama3`, `mistral`,
    `function`)."""
    wrong_names: float = Field(default=0.05, ge=0.0, le=1.0)
    """Share of replies that call a tool that does not exist."""
    repeats: float = Field(default=0.05, ge=0.0, le=1.0)
    """Share of replies that repeat the previous reply."""
    truncated: float = Field(default=0.05, ge=0.0, le=1.0)
    """Share of replies cut off inside a call's JSON."""
    no_call: float = Field(default=0.05, ge=0.0, le=1.0)
    """Share of replies that only talk ("I will now read the file.") and call nothing."""
    chatter: float = _Rate
    """Share of text answers (a plan) wrapped in prose, with no fence around the JSON."""
    raw_quotes: float = Field(default=0.05, ge=0.0, le=1.0)
    """Share of calls written as JSON whose string values keep their own quotes
    unescaped, as code with a docstring or a dict in it does."""
    invented_results: float = Field(default=0.05, ge=0.0, le=1.0)
    """Share of text calls that come after a tool result the model wrote itself
    (`<tool_response>...</tool_response>`)."""
    whole_files: float = Field(default=0.05, ge=0.0, le=1.0)
    """Share of `write_file` calls written as the file itself in a fence, its path on the
    line above, calling no tool (what aider calls the "whole" format)."""

    def model_post_init(self, context: object) -> None:
        unknown = sorted(set(self.formats) - set(TEXT_FORMATS))
        if unknown:
            raise ValueError(f"unknown formats {unknown}; known: {', '.join(TEXT_FORMATS)}")
