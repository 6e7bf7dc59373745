"""The ridge readout of random features: ridge regression in closed form with the penalty chosen by exact
leave-one-out error (`RidgeReadout`), its one-vs-all classification targets (`one_vs_all`), and the temperature that
turns its decision values into class probabilities (`_fit_probability_temperature`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["RidgeReadout", "one_vs_all", "DEFAULT_ALPHAS"]

# The penalties searched: wide, since the features' number (hundreds to thousands) sets the Gram matrix's scale.
DEFAULT_ALPHAS = tuple(float(a) for a in np.logspace(-3, 5, 17))


def _float64(array, device=None, name: str = "features") -> torch.Tensor:
    """``array`` (tensor or array-like) as a float64 tensor, on its own device (tensors) or ``device``."""
    if isinstance(array, torch.Tensor):
        tensor = array.detach()
        if not (tensor.is_floating_point() or tensor.dtype in (torch.int32, torch.int64, torch.bool)):
            raise TypeError(f"{name} must be real numbers, got a {tensor.dtype} tensor")
        return tensor.to(torch.float64)
    try:
        values = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be real numbers: {error}") from None
    return torch.as_tensor(values, device=device)


class RidgeReadout:
    """Ridge regression in closed form with the penalty chosen by exact leave-one-out error (float64 torch).

    For standardised features Z (N, P) (centred with an intercept) and targets Y (N, k), the weights for
    penalty α are W = (ZᵀZ + αI)⁻¹ Zᵀ Y_c, the intercept unpenalised. The leave-one-out residual of sample i
    is r_i / (1 − H_ii), r the training residual and H the hat matrix (with an intercept
    1/N + Z (ZᵀZ + αI)⁻¹ Zᵀ): both come from one eigendecomposition, of the Gram matrix ZZᵀ when N <= P and
    of ZᵀZ otherwise, for all α at once. The α with the least mean squared leave-one-out error over samples
    and targets is kept (the first of equals); this is scikit-learn's ``RidgeCV``/``RidgeClassifierCV`` with
    ``cv=None`` (tests/test_random_features.py checks both).

    Classification (``classification=True``): integer labels become one-vs-all targets, +1 for the sample's class
    and −1 elsewhere (one column, +1 for the larger class, with two classes), as scikit-learn's
    ``RidgeClassifier``; the predicted class is the largest decision value (its sign with two classes).

    Arguments:
        alphas: the penalties α searched, a positive number or a non-empty sequence of them (default
            `DEFAULT_ALPHAS`, 17 values from 1e-3 to 1e5).
        classification: targets are class labels (default False: real targets).
        standardize: divide each feature, centred, by its training standard deviation (default True; a constant
            feature is only centred).
        fit_intercept: fit an unpenalised intercept (default True).

    Fitted attributes (torch float64 tensors on the features' device): ``alpha_`` (float), ``cv_errors_``
    (n_alphas,) mean squared leave-one-out error per α, ``best_score_`` (−its least value), ``coef_`` (P, k) and
    ``intercept_`` (k,) in the original feature units, ``feature_mean_`` and ``feature_scale_`` (P,),
    ``n_features_in_``; ``classes_`` (K,) long, the sorted labels, for classification.
    `leave_one_out_decision_function` gives the training samples' leave-one-out outputs at ``alpha_``.
    """

    def __init__(
        self,
        alphas=DEFAULT_ALPHAS,
        *,
        classification: bool = False,
        standardize: bool = True,
        fit_intercept: bool = True,
    ):
        grid = np.atleast_1d(np.asarray(alphas, dtype=np.float64)) if _is_numeric(alphas) else None
        if grid is None or grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid <= 0):
            raise ValueError(
                f"alphas must be a positive number or a non-empty 1-D sequence of positive finite "
                f"numbers, got {alphas!r}"
            )
        self.alphas = tuple(float(a) for a in grid)
        self.classification = bool(classification)
        self.standardize = bool(standardize)
        self.fit_intercept = bool(fit_intercept)

    def _features(self, features) -> torch.Tensor:
        F = _float64(features, name="features")
        if F.dim() != 2 or F.shape[0] == 0 or F.shape[1] == 0:
            raise ValueError(f"features must have shape (N, P) with N, P >= 1, got {tuple(F.shape)}")
        if not bool(torch.isfinite(F).all()):
            raise ValueError("features hold NaN or infinite values")
        return F

    def fit(self, features, targets) -> RidgeReadout:
        """Fit the readout and choose α.

        Arguments:
            features: (N, P) real features (tensor or array; N >= 2).
            targets: (N,) integer labels (classification, at least 2 distinct), or (N,) / (N, k) real targets.

        Returns:
            self, fitted.

        Raises:
            ValueError: bad shapes, non-finite values, fewer than 2 samples or classes.
        """
        F = self._features(features)
        n, p = F.shape
        if n < 2:
            raise ValueError(f"features must hold at least 2 samples to fit and cross-validate, got n_samples={n}")
        Y = self._targets(targets, n, F.device)
        if self.fit_intercept:
            mean = F.mean(dim=0)
        else:
            mean = torch.zeros(p, dtype=F.dtype, device=F.device)
        if self.standardize:
            scale = (F - F.mean(dim=0)).square().mean(dim=0).sqrt()
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        else:
            scale = torch.ones(p, dtype=F.dtype, device=F.device)
        Z = (F - mean) / scale
        y_mean = Y.mean(dim=0) if self.fit_intercept else torch.zeros(Y.shape[1], dtype=Y.dtype, device=Y.device)
        Yc = Y - y_mean
        alphas = torch.tensor(self.alphas, dtype=F.dtype, device=F.device)
        leverage_floor = 1.0 / n if self.fit_intercept else 0.0  # the intercept's share of every hat-matrix diagonal
        if n > p:
            # covariance mode: ZᵀZ = V diag(λ) Vᵀ; with U = Z V, H = U diag(1/(λ+α)) Uᵀ
            eigenvalues, V = torch.linalg.eigh(Z.T @ Z)
            U = Z @ V
            U_y = U.T @ Yc
            U_sq = U.square()
        else:
            # Gram mode: ZZᵀ = Q diag(λ) Qᵀ; H = Q diag(λ/(λ+α)) Qᵀ, W = Zᵀ Q diag(1/(λ+α)) Qᵀ Y_c
            eigenvalues, Q = torch.linalg.eigh(Z @ Z.T)
            Q_y = Q.T @ Yc
            Q_sq = Q.square()
        eigenvalues = eigenvalues.clamp(min=0)  # rounding makes null directions slightly negative

        def leave_one_out_residuals(alpha: torch.Tensor) -> torch.Tensor:
            """(N, k) each sample's residual under the readout fitted without it: r_i / (1 − H_ii)."""
            inverse = 1.0 / (eigenvalues + alpha)
            if n > p:
                fitted = U @ (inverse.unsqueeze(1) * U_y)
                leverage = U_sq @ inverse + leverage_floor
            else:
                shrink = eigenvalues * inverse
                fitted = Q @ (shrink.unsqueeze(1) * Q_y)
                leverage = Q_sq @ shrink + leverage_floor
            return (Yc - fitted) / (1.0 - leverage).unsqueeze(1)

        errors = torch.stack([leave_one_out_residuals(alpha).square().mean() for alpha in alphas])
        best = int(torch.argmin(errors))  # the first of equal errors, as scikit-learn's strict comparison
        # target minus leave-one-out residual: what the readout fitted without sample i outputs for it
        self._leave_one_out_outputs = Y - leave_one_out_residuals(alphas[best])
        inverse = 1.0 / (eigenvalues + alphas[best])
        if n > p:
            W = V @ (inverse.unsqueeze(1) * U_y)
        else:
            W = Z.T @ (Q @ (inverse.unsqueeze(1) * Q_y))
        self.alpha_ = self.alphas[best]
        self.cv_errors_ = errors
        self.best_score_ = float(-errors[best])
        self._weights, self._target_mean = W, y_mean  # in standardised units: decisions from Z, as fitted
        self.coef_ = W / scale.unsqueeze(1)
        self.intercept_ = y_mean - mean @ self.coef_
        self.feature_mean_, self.feature_scale_ = mean, scale
        self.n_features_in_ = p
        return self

    def _targets(self, targets, n: int, device) -> torch.Tensor:
        if self.classification:
            labels = _float64(targets, device, name="targets").to(device)
            if labels.dim() != 1 or labels.shape[0] != n:
                raise ValueError(f"targets must be (N={n},) class labels, got shape {tuple(labels.shape)}")
            if not bool((labels == labels.round()).all()):
                raise ValueError("classification targets must be integer labels (map other labels to integers)")
            classes, codes = torch.unique(labels.long(), sorted=True, return_inverse=True)
            if classes.numel() < 2:
                raise ValueError(f"targets hold only {classes.numel()} class: a classifier needs at least 2")
            self.classes_ = classes
            self._target_ndim = 1
            return one_vs_all(codes, classes.numel())
        values = _float64(targets, device, name="targets").to(device)
        if values.dim() not in (1, 2) or values.shape[0] != n:
            raise ValueError(f"targets must have shape (N={n},) or (N, k), got {tuple(values.shape)}")
        if not bool(torch.isfinite(values).all()):
            raise ValueError("targets hold NaN or infinite values")
        self._target_ndim = values.dim()
        return values.reshape(n, -1)

    def decision_function(self, features) -> torch.Tensor:
        """The readout's outputs.

        Arguments:
            features: (M, P) features, P as at fit.

        Returns:
            float64 tensor: (M,) for regression on (N,) targets and for two classes, else (M, k) / (M, K).
        """
        if not hasattr(self, "coef_"):
            raise RuntimeError("this RidgeReadout is not fitted yet: call fit(features, targets) first")
        F = self._features(features).to(self.coef_.device)
        if F.shape[1] != self.n_features_in_:
            raise ValueError(f"features have {F.shape[1]} columns, the readout was fitted on {self.n_features_in_}")
        outputs = F @ self.coef_ + self.intercept_  # the standardisation folded in: one pass over F
        return outputs[:, 0] if (outputs.shape[1] == 1 and self._target_ndim == 1) else outputs

    def leave_one_out_decision_function(self) -> torch.Tensor:
        """The training samples' leave-one-out outputs at the chosen ``alpha_``: sample i's output from the readout
        fitted on the other N − 1 samples, y_i − r_i / (1 − H_ii) (the residuals whose mean square chose α, from the
        same eigendecomposition). The features' standardisation (mean and scale) stays that of all N samples, as in
        the choice of α and in scikit-learn's ``RidgeCV``; with ``standardize=False`` these are exactly the outputs
        of refits without each sample (the intercept is unpenalised, so the centring does not matter).

        Returns:
            float64 tensor on the features' device, shaped as `decision_function`'s on the training features:
            (N,) for regression on (N,) targets and for two classes, else (N, k) / (N, K).
        """
        if not hasattr(self, "coef_"):
            raise RuntimeError("this RidgeReadout is not fitted yet: call fit(features, targets) first")
        outputs = self._leave_one_out_outputs
        return outputs[:, 0] if (outputs.shape[1] == 1 and self._target_ndim == 1) else outputs

    def predict(self, features) -> torch.Tensor:
        """Predicted labels (classification: from ``classes_``) or targets.

        Arguments:
            features: (M, P) features.

        Returns:
            (M,) long labels, or (M,) / (M, k) float64 targets.
        """
        outputs = self.decision_function(features)
        if not self.classification:
            return outputs
        index = (outputs > 0).long() if outputs.dim() == 1 else outputs.argmax(dim=1)
        return self.classes_[index]


def one_vs_all(codes: torch.Tensor, num_classes: int) -> torch.Tensor:
    """The ridge classifier's targets: +1 in each sample's class column and −1 elsewhere, as scikit-learn's
    ``RidgeClassifier``; with two classes one column, +1 for the second class.

    Arguments:
        codes: (N,) class indices in [0, num_classes).
        num_classes: K >= 2.

    Returns:
        (N, K) float64, or (N, 1) for K = 2.
    """
    n = codes.shape[0]
    Y = -torch.ones(n, num_classes, dtype=torch.float64, device=codes.device)
    Y[torch.arange(n, device=codes.device), codes] = 1.0
    return Y[:, 1:] if num_classes == 2 else Y


# The probability temperature T is searched between these multiples of the largest spread of a training series'
# leave-one-out decision values: at the lower end that series' logits differ by 30 (its probabilities stay apart from
# 0 and 1 in float64, so they still rank series for an AUROC, where leave-one-out separates the classes and the
# log-loss alone would send T to 0); at the upper end all probabilities are within 1e-3 of uniform.
_TEMPERATURE_RANGE = (1.0 / 30.0, 1000.0)


def _class_logits(decision: torch.Tensor) -> torch.Tensor:
    """The readout's decision values as logits of its classes, up to a temperature.

    Arguments:
        decision: (N,) two classes' decision values d (positive: the second class), or (N, K) one-vs-all columns.

    Returns:
        (N, 2) columns (0, d), whose softmax is (1 − σ(d), σ(d)), or the (N, K) decision values themselves.
    """
    if decision.dim() == 1:
        return torch.stack([torch.zeros_like(decision), decision], dim=1)
    return decision


def _fit_probability_temperature(decision: torch.Tensor, codes: torch.Tensor) -> float:
    """The temperature T > 0 minimising the mean log-loss of softmax(logits / T) (`_class_logits`), within
    `_TEMPERATURE_RANGE`.

    The log-loss is convex in β = 1/T (a log-sum-exp of linear functions of β minus a linear one), so its derivative
    increases in β: Newton's method on it, kept inside a bracket that each step narrows (bisection where Newton's
    step would leave it), in float64.

    Arguments:
        decision: (N,) or (N, K) decision values (the readout's leave-one-out ones at fit).
        codes: (N,) class indices in [0, K).

    Returns:
        T, a float; 1.0 where no row has finite, unequal logits (every T then gives the same probabilities).
    """
    logits = _class_logits(decision.detach().to(device="cpu", dtype=torch.float64))
    codes = codes.detach().to(device="cpu", dtype=torch.long)
    finite = torch.isfinite(logits).all(dim=1)  # a leverage rounded to 1 would give an infinite value
    logits, codes = logits[finite], codes[finite]
    if logits.shape[0] == 0:
        return 1.0
    spread = float((logits.max(dim=1).values - logits.min(dim=1).values).max())
    if not spread > 0:
        return 1.0
    true_logit = logits.gather(1, codes.unsqueeze(1)).squeeze(1)

    def derivatives(beta: float) -> tuple[float, float]:
        """The mean log-loss's first and second derivatives in β."""
        probabilities = torch.softmax(beta * logits, dim=1)
        expected = (probabilities * logits).sum(dim=1)
        variance = (probabilities * (logits - expected.unsqueeze(1)).square()).sum(dim=1)
        return float((expected - true_logit).mean()), float(variance.mean())

    low, high = 1.0 / (_TEMPERATURE_RANGE[1] * spread), 1.0 / (_TEMPERATURE_RANGE[0] * spread)
    if derivatives(low)[0] >= 0:  # the loss only grows with confidence: the decisions do not inform
        return 1.0 / low
    if derivatives(high)[0] <= 0:  # it only falls: leave-one-out separates the classes
        return 1.0 / high
    beta = math.sqrt(low * high)
    for _ in range(200):
        slope, curvature = derivatives(beta)
        if slope == 0.0:
            break
        if slope > 0:
            high = beta
        else:
            low = beta
        newton = beta - slope / curvature if curvature > 0 else math.nan
        previous, beta = beta, (newton if low < newton < high else 0.5 * (low + high))
        if abs(beta - previous) <= 1e-14 * beta:
            break
    return 1.0 / beta


def _is_numeric(alphas) -> bool:
    try:
        np.asarray(alphas, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return not isinstance(alphas, (str, bytes, bool))
