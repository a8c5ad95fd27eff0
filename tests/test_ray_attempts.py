"""explain_dataset bounds the retries of a shard itself (Ray Data's per-call restart
options are deprecated): attempts are counted on disk, and past ``max_retries`` the
shard fails the run with an error naming it, instead of being retried forever."""

from __future__ import annotations

import pytest

from captum_graphshap.distributed.ray_runner import _count_attempt


def test_a_shard_fails_the_run_after_max_retries_retries(tmp_path):
    for _ in range(3):  # the first attempt and two retries
        _count_attempt(tmp_path, 7, max_retries=2)
    _count_attempt(tmp_path, 8, max_retries=2)  # other shards count apart
    with pytest.raises(RuntimeError, match=r"shard 7 failed 3 times .*max_retries=2"):
        _count_attempt(tmp_path, 7, max_retries=2)


def test_no_retry_allowed_fails_at_the_second_attempt(tmp_path):
    _count_attempt(tmp_path, 0, max_retries=0)
    with pytest.raises(RuntimeError, match="shard 0 failed 1 times"):
        _count_attempt(tmp_path, 0, max_retries=0)
