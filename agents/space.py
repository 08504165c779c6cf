"""The sweep's search space: ``policies/search_space.yaml``, validated, and its Optuna binding.

A space maps dotted training-config keys (``optim.lr``) to a float, int or categorical
distribution. ``load_space`` refuses anything malformed with a ``PolicyError`` naming the key;
``default_params`` reads the base config's values and refuses a base that lies outside the
space (the first trial is always the default config, through ``enqueue_trial``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from segfactory.errors import PolicyError
from segfactory.home import SOURCE_ROOT
from vision.registry import PLAIN_UNET

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

SEARCH_SPACE = SOURCE_ROOT / "policies" / "search_space.yaml"
MAX_PARAMS = 32  # keys in one space; past it: PolicyError
MAX_CHOICES = 64  # values of one categorical; past it: PolicyError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FloatParam(_Strict):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> FloatParam:
        if not self.low < self.high:
            raise ValueError(f"low {self.low} must be below high {self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"a log range needs low > 0; got {self.low}")
        return self


class IntParam(_Strict):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False

    @model_validator(mode="after")
    def _range(self) -> IntParam:
        if not self.low < self.high:
            raise ValueError(f"low {self.low} must be below high {self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"a log range needs low > 0; got {self.low}")
        return self


ParamValue = int | float | str | bool  # one value of a space's key: a float, an int or a categorical choice
# Deep supervision is unet-plain's alone (vision.config refuses it on another model): a trial that
# picks another model turns it off, so that a draw of the model is a config that can train.
PLAIN_ONLY: dict[str, ParamValue] = {"deep_supervision": False}


class CategoricalParam(_Strict):
    type: Literal["categorical"]
    choices: list[ParamValue] = Field(min_length=1, max_length=MAX_CHOICES)


Param = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


class SearchSpace(_Strict):
    schema_version: Literal[1] = 1
    params: dict[str, Param] = Field(min_length=1, max_length=MAX_PARAMS)

    def distributions(self) -> dict[str, BaseDistribution]:
        """The Optuna distributions, by key."""
        import optuna.distributions as d

        out: dict[str, BaseDistribution] = {}
        for key, p in self.params.items():
            if isinstance(p, FloatParam):
                out[key] = d.FloatDistribution(p.low, p.high, log=p.log)
            elif isinstance(p, IntParam):
                out[key] = d.IntDistribution(p.low, p.high, log=p.log)
            else:
                out[key] = d.CategoricalDistribution(p.choices)
        return out

    def suggest(self, trial: Any) -> dict[str, ParamValue]:
        """The trial's config patch (dotted keys), one ``trial.suggest_*`` per key."""
        patch: dict[str, ParamValue] = {}
        for key, p in self.params.items():
            if isinstance(p, FloatParam):
                patch[key] = trial.suggest_float(key, p.low, p.high, log=p.log)
            elif isinstance(p, IntParam):
                patch[key] = trial.suggest_int(key, p.low, p.high, log=p.log)
            else:
                patch[key] = trial.suggest_categorical(key, p.choices)
        return coherent(patch)


def coherent(change: dict[str, ParamValue]) -> dict[str, ParamValue]:
    """``change`` with what the model it picks cannot have turned off (``PLAIN_ONLY``)."""
    if "model.name" in change and change["model.name"] != PLAIN_UNET:
        return {**change, **PLAIN_ONLY}
    return change


def load_space(path: Path = SEARCH_SPACE) -> SearchSpace:
    """Read and validate a space; any problem is a PolicyError that says where and what."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PolicyError(f"search space {path}: cannot read it ({exc})") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"search space {path}: not valid YAML ({exc}); fix the file") from None
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PolicyError(
            f"search space {path}: invalid at {where or 'top level'}: {first['msg']}; "
            "see docs/controls.md for the format"
        ) from None


def _lookup(config: dict[str, JsonValue], dotted: str) -> JsonValue:
    node: JsonValue = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise PolicyError(
                f"search space key {dotted!r} is not set in the base config; "
                "set it there so the default trial is well defined"
            )
        node = node[part]
    return node


def default_params(space: SearchSpace, base_config: dict[str, JsonValue]) -> dict[str, ParamValue]:
    """The base config's values for every key; PolicyError when one lies outside the space."""
    params: dict[str, ParamValue] = {}
    for key, p in space.params.items():
        value = _lookup(base_config, key)
        inside = (
            (value in p.choices)
            if isinstance(p, CategoricalParam)
            else (isinstance(value, int | float) and p.low <= value <= p.high)
        )
        # a choice is an int, float, str or bool: a value found among them is one too
        if not inside or not isinstance(value, int | float | str | bool):
            raise PolicyError(
                f"the base config's {key} = {value!r} lies outside the search space "
                f"({p.model_dump(exclude={'type'})}); widen the space so trial 0 is the default"
            )
        params[key] = value
    return params


__all__ = ["SEARCH_SPACE", "ParamValue", "SearchSpace", "default_params", "load_space"]
