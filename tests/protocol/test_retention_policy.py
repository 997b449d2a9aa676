"""A new stream's retention policy (``protocol.retention``): each limit from the first layer that
names it, and a policy is true when it has any limit."""

from __future__ import annotations

import pytest

from durable_streams_server.protocol.retention import HEADERS, NO_LIMITS, RetentionPolicy, resolve


@pytest.mark.parametrize("name", list(HEADERS))
def test_a_policy_is_true_with_any_one_limit(name: str) -> None:
    assert RetentionPolicy(**{name: 1})
    assert RetentionPolicy(**{name: 1}).to_json() == {name: 1}


def test_a_policy_without_limits_is_false() -> None:
    assert not RetentionPolicy()
    assert not NO_LIMITS and RetentionPolicy() == NO_LIMITS and NO_LIMITS.to_json() == {}


def test_each_limit_comes_from_the_first_layer_that_names_it() -> None:
    request = {"max_bytes": None}  # (named, as "none": no limit, whatever the layers below say)
    bucket = {"max_bytes": 100, "max_messages": 7}
    server = {"max_messages": 9, "max_age_s": 60}
    assert resolve(request, bucket, server) == RetentionPolicy(max_age_s=60, max_bytes=None, max_messages=7)
    assert resolve({}, {}, server) == RetentionPolicy(max_age_s=60, max_messages=9)
    assert resolve({}, {}, {}) == RetentionPolicy()
