"""`make bench`: what a learner waits for, measured on this machine; results in docs/benchmarks.md.

Benchmarks, not tests: nothing here asserts a time. ``python -m bench --help`` lists the knobs.
"""
