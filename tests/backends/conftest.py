"""Fixtures for the backends tests."""

import pytest

from backends.profile import profile_metadata, write_profile
from backends_helpers import roofline_profile_rows


@pytest.fixture
def profile_file(tmp_path):
    m, rows = roofline_profile_rows()
    path = tmp_path / "llama-3.1-8b__H200.parquet"
    write_profile(rows, path, profile_metadata(m, {"name": "H200"}, command="pytest"))
    return path
