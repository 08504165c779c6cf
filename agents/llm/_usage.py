"""LLM usage: tokens, latency and cost, accounted apart from device time."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from segfactory.errors import LimitExceeded

# USD per million tokens (input, output), matched by model-name prefix; longest prefix wins.
# A model not listed is accounted with cost_known = false rather than guessed.
PRICES_USD_PER_MTOK: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1": (2.00, 8.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-haiku": (1.00, 5.00),
    "claude-sonnet": (3.00, 15.00),
    "claude-opus": (15.00, 75.00),
}


def price_for(model: str) -> tuple[float, float] | None:
    matches = [p for p in PRICES_USD_PER_MTOK if model.startswith(p)]
    return PRICES_USD_PER_MTOK[max(matches, key=len)] if matches else None


class LLMUsage(BaseModel):
    """Running totals for one run (all providers and roles together)."""

    model_config = ConfigDict(extra="forbid")
    calls: int = 0
    attempts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    cost_known: bool = True
    token_cap: int | None = None  # run-level cap from budgets.yaml; past it: LimitExceeded

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def check_cap(self) -> None:
        """Raise before a call once the run's token budget is spent."""
        if self.token_cap is not None and self.tokens >= self.token_cap:
            raise LimitExceeded(
                f"LLM token budget spent: {self.tokens} of {self.token_cap} tokens used; "
                "raise run.llm_tokens in policies/budgets.yaml or end the run"
            )

    def record(self, model: str, input_tokens: int, output_tokens: int, latency_s: float) -> None:
        self.attempts += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.latency_s += latency_s
        price = price_for(model)
        if price is None:
            self.cost_known = self.cost_known and (input_tokens + output_tokens == 0)
            return
        self.cost_usd += (input_tokens * price[0] + output_tokens * price[1]) / 1e6
