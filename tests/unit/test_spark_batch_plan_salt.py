"""The salt a batch's plan is rebound with (reliable_kafka.spark.batch_plans) is the literal
``derive.salt_sql`` wrote into the plan: the same 8 bytes, or no literal would be found and every
batch's plan would be built anew."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reliable_kafka.spark.batch_plans import _salt_bytes
from reliable_kafka.spark.derive import salt_sql


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_the_salt_bytes_are_the_plans_literal(salt: int) -> None:
    assert salt_sql(salt) == f"X'{bytes(_salt_bytes(salt)).hex()}'"
