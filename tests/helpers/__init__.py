"""Helpers shared by the tests, one module per area (``from helpers.build import make_corpus``).

``tests/`` is on ``sys.path`` while pytest runs (the root ``tests/conftest.py`` puts it there),
so these import as ``helpers.<area>`` from any test folder. They are plain modules, not
conftests: a fixture defined here is used by importing it into the test module.
"""
