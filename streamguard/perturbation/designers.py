"""Registry of the per-record channel designers: kind name → designer, with what each one needs.

==================  =======  ======  ==========================  ==========================================
kind                model    inputs  measures (``measure=``)     designer (paper, notes)
==================  =======  ======  ==========================  ==========================================
rr                  prior    x       —                           E_d, m-ary randomized response (001 §6.1)
rr-prior            prior    x       —                           E_i, identifiability-optimal (001 §6.2)
watchdog            joint    x       alip, lip, ldp, l1, chi2,   watchdog, complete merging (003 §3.2)
                                     alpha-lift (+ -based /
                                     -inverse halves)
watchdog-subset     joint    x       as watchdog                 subset merging, Alg. 1 corrected (003 §3.3)
aorr                joint    x       (alip)                      MI-optimal ALIP (003 §3.4)
srr                 joint    x       (alip)                      subset randomized response (003 §3.5)
linear              joint    x       ldp, log_lift               linear reduction, Lemma 1 (004 §3.2)
linear-optimal      joint    x       ldp, log_lift               optimal Markov kernel LP (004 §3.5)
linear-nonmarkov    joint    sx      ldp, log_lift               optimal non-Markov transport (004 §3.3)
==================  =======  ======  ==========================  ==========================================

"prior" kinds read only P_X (paper 001: the secret is X itself); given a general joint they use its
P_X. "joint" kinds design against P(S, X) and refuse a prior-only model (S = X). ``lam`` splits the
budget ε_l = λε, ε_u = (1−λ)ε for the ALIP-family kinds. Kind-specific options: ``alpha`` for the
watchdog's α-lift measures, ``cost`` for the linear LP kinds ("tv", "abs", "squared").

Designer modules are imported on first use (they pull in scipy), so listing kinds is cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .model import DesignError, Joint, PerturbationChannel

_WATCHDOG_MEASURES = ("alip", "lip", "ldp", *(f"{m}{v}" for m in ("l1", "chi2", "alpha-lift")
                                              for v in ("", "-based", "-inverse")))
_LINEAR_MEASURES = ("ldp", "log_lift")


def _call(module: str, name: str) -> Callable[..., PerturbationChannel]:
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class DesignerSpec:
    """One kind: what model it reads, whether its rows are x or (s, x), what it accepts."""

    kind: str
    model: Literal["prior", "joint"]
    inputs: Literal["x", "sx"]
    measures: tuple[str, ...]
    takes_lambda: bool
    options: tuple[str, ...]
    summary: str
    build: Callable[[Joint, float, dict[str, Any]], PerturbationChannel]


def _rr(joint: Joint, eps: float, kw: dict[str, Any]) -> PerturbationChannel:
    return _call("randomized_response", "rr_channel")(joint.n_x, epsilon=eps)


def _rr_prior(joint: Joint, eps: float, kw: dict[str, Any]) -> PerturbationChannel:
    return _call("rr_prior", "rr_prior_channel")(joint, epsilon=eps)


def _watchdog(merge: str) -> Callable[[Joint, float, dict[str, Any]], PerturbationChannel]:
    return lambda joint, eps, kw: _call("watchdog", "watchdog_channel")(joint, eps, merge=merge, **kw)


def _lift_opt(name: str) -> Callable[[Joint, float, dict[str, Any]], PerturbationChannel]:
    return lambda joint, eps, kw: _call(name, f"{name}_channel")(joint, eps, **kw)


def _linear(name: str) -> Callable[[Joint, float, dict[str, Any]], PerturbationChannel]:
    return lambda joint, eps, kw: _call("linear_reduction", name)(joint, eps, **kw)


DESIGNERS: dict[str, DesignerSpec] = {spec.kind: spec for spec in (
    DesignerSpec("rr", "prior", "x", (), False, (), "E_d: m-ary randomized response, ε-LDP w.r.t. X", _rr),
    DesignerSpec("rr-prior", "prior", "x", (), False, (), "E_i: ε-identifiable under the prior (RR fallback)",
                 _rr_prior),
    DesignerSpec("watchdog", "joint", "x", _WATCHDOG_MEASURES, True, ("alpha",),
                 "watchdog with complete merging (E4 repair)", _watchdog("complete")),
    DesignerSpec("watchdog-subset", "joint", "x", _WATCHDOG_MEASURES, True, ("alpha",),
                 "watchdog with subset merging (Alg. 1 corrected, E4 repair)", _watchdog("subset")),
    DesignerSpec("aorr", "joint", "x", ("alip",), True, (), "AORR: MI-optimal (λε, (1−λ)ε)-ALIP",
                 _lift_opt("aorr")),
    DesignerSpec("srr", "joint", "x", ("alip",), True, (), "SRR: AORR per subset of Alg. 1", _lift_opt("srr")),
    DesignerSpec("linear", "joint", "x", _LINEAR_MEASURES, False, (),
                 "linear reduction, Markov kernel of Lemma 1", _linear("linear_markov_channel")),
    DesignerSpec("linear-optimal", "joint", "x", _LINEAR_MEASURES, False, ("cost",),
                 "linear reduction, optimal Markov kernel (LP)", _linear("linear_optimal_markov_channel")),
    DesignerSpec("linear-nonmarkov", "joint", "sx", _LINEAR_MEASURES, False, ("cost",),
                 "linear reduction, optimal S-dependent kernel (reads s)", _linear("linear_nonmarkov_channel")),
)}
KINDS = tuple(DESIGNERS)


def design(kind: str, joint: Joint, epsilon: float, *, lam: float | None = None, measure: str | None = None,
           **options: Any) -> PerturbationChannel:
    """Design a channel of ``kind`` for ``joint`` at budget ε (see the module table). Raises
    :class:`DesignError` naming the problem for an unknown kind, a measure, λ or option the kind
    does not take, a prior where the kind needs a joint, or a budget the designer cannot meet."""
    spec = DESIGNERS.get(kind)
    if spec is None:
        raise DesignError(f"unknown channel kind {kind!r}; known: {', '.join(KINDS)}")
    if spec.model == "joint" and joint.is_prior_only:
        raise DesignError(f"kind {kind!r} designs against a joint P(S, X) of a sensitive S and the data X; "
                          "give a joint, not a prior")
    kw: dict[str, Any] = {}
    if measure is not None:
        if measure not in spec.measures:
            raise DesignError(f"kind {kind!r} takes measure {', '.join(spec.measures) or '(none)'}; got {measure!r}")
        if len(spec.measures) > 1:
            kw["measure"] = measure
    if lam is not None:
        if not spec.takes_lambda:
            raise DesignError(f"kind {kind!r} has a single budget; lambda does not apply")
        kw["lam"] = lam
    for name, value in options.items():
        if value is None:
            continue
        if name not in spec.options:
            raise DesignError(f"kind {kind!r} takes no option {name!r}")
        kw[name] = value
    return spec.build(joint, epsilon, kw)
