"""Helpers shared by the tests (importable as ``support``: tests/ is on sys.path through
tests/conftest.py, and rank processes get it through the driver's sys.path)."""
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS_DIR = os.path.join(REPO_ROOT, "tests")
