"""Leakage measures on hand-made rows, and distance correlation against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flowsplit.privacy.measures import (
    ascii_recovered,
    ascii_runs,
    bytes_recovered,
    distance_correlation,
    distance_correlation_np,
    payload_mask,
    seq_errors,
)


def test_payload_mask_stops_at_the_last_nonzero_byte():
    x = np.array([[5, 0, 7, 0, 0], [0, 0, 0, 0, 0], [1, 2, 3, 4, 5]], dtype=np.uint8)
    expected = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    assert (payload_mask(x) == expected).all()


def test_bytes_recovered_counts_payload_positions_only():
    true = np.array([[5, 0, 7, 0, 0], [1, 2, 3, 4, 5]], dtype=np.uint8)
    pred = np.array([[5, 9, 7, 0, 0], [1, 0, 3, 0, 0]], dtype=np.uint8)
    # Payload: 3 + 5 = 8 positions; right: 5, 7 (row 0: 2 of 3) and 1, 3 (row 1: 2 of 5).
    assert bytes_recovered(true, pred) == pytest.approx(4 / 8)


def test_ascii_runs_need_four_printable_characters():
    row = np.frombuffer(b"\x00abc\x01host.example\x02GET /\xff", dtype=np.uint8)
    spans = [bytes(row[a:b]) for a, b in ascii_runs(row)]
    assert spans == [b"host.example", b"GET /"]


def test_ascii_recovered_needs_every_character_of_a_run():
    true = np.frombuffer(b"\x00host\x00GET /\x00", dtype=np.uint8)[None, :]
    pred = true.copy()
    pred[0, 7] = ord("X")  # breaks "GET /", keeps "host"
    share, n_runs = ascii_recovered(true, pred)
    assert (share, n_runs) == (0.5, 2)


def test_seq_errors_is_one_for_the_mean_guess():
    rng = np.random.default_rng(0)
    true = rng.normal(size=(500, 8, 3))
    scale = true.reshape(-1, 3).std(0)
    errs = seq_errors(true, np.broadcast_to(true.mean((0, 1)), true.shape), scale)
    assert errs["mean"] == pytest.approx(1.0, abs=1e-9)
    assert seq_errors(true, true, scale)["mean"] == 0.0


def test_distance_correlation_of_a_similarity_transform_is_one():
    x = torch.randn(60, 5, dtype=torch.float64)
    rotation, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64))
    assert float(distance_correlation(x, 3.0 * x @ rotation + 7.0)) == pytest.approx(1.0, abs=1e-6)


def test_distance_correlation_of_a_constant_is_zero():
    x = torch.randn(30, 4, dtype=torch.float64)
    assert float(distance_correlation(x, torch.ones(30, 2, dtype=torch.float64))) == 0.0


def test_distance_correlation_matches_the_bivariate_normal_closed_form():
    # Szekely, Rizzo and Bakirov (2007), eq. (2.14): dCor^2 of a standard bivariate
    # normal with correlation rho.
    def closed_form(rho: float) -> float:
        num = rho * math.asin(rho) + math.sqrt(1 - rho**2) - rho * math.asin(rho / 2)
        num += -math.sqrt(4 - rho**2) + 1
        return math.sqrt(num / (1 + math.pi / 3 - math.sqrt(3)))

    rng = np.random.default_rng(1)
    for rho, tol in ((0.0, 0.06), (0.5, 0.03), (0.9, 0.02)):
        cov = np.array([[1.0, rho], [rho, 1.0]])
        xy = rng.multivariate_normal([0, 0], cov, size=1200)
        got = distance_correlation_np(xy[:, :1], xy[:, 1:], max_rows=1200)
        # The V-statistic is biased upwards, most at rho = 0 (about 1/sqrt(n)).
        assert got == pytest.approx(closed_form(rho), abs=tol), rho


def test_distance_correlation_is_differentiable():
    x = torch.randn(20, 3)
    z = torch.randn(20, 4, requires_grad=True)
    distance_correlation(x, z).backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()
