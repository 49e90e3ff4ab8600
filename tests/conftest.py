"""Test-suite root. Its folder is on ``sys.path`` (pytest's rootdir conftest), so the shared helper
``plot_data`` imports from any test folder. Tests mirror the wings: ``madmax/``, ``lm/``, ``serve/``,
``shared/`` (services every engine uses), ``behaviour/`` (the CLI as a user drives it), ``meta/``
(layout, lint, docs, signatures)."""
