"""The Node.js ecosystem: node's test runner with per-test results (runner.py, reporter.mjs)."""
