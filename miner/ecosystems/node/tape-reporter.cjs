// miner's reporter for tape: runs one test file with tape's object stream (tape.createStream({objectMode: true}))
// and appends one JSON object a test to the report, in the shape of miner's node --test reporter:
//   {"file": "test/parse.js", "names": ["test/parse.js", "parent", "test"], "passed": true, ...}
// A file that throws before its tests run is its own entry (names: [file]). A message's first line
// is one tape or node prints too: the failed assertion's name ("not ok 3 NAME"), or the error that
// stopped the file ("Error: Cannot find module 'x'"), which is also what a test cut short by it gets.
//   node tape-reporter.cjs REPORT FILE [MODULE_TO_REQUIRE_FIRST ...]
'use strict';
const fs = require('fs');
const path = require('path');

const [report, file, ...preload] = process.argv.slice(2);
const root = process.cwd();
const out = fs.openSync(report, 'a');
const write = (event) => fs.writeSync(out, JSON.stringify(event) + '\n');
const tests = new Map();

let crash = '';

function errorLine(error) {
  if (error && typeof error === 'object' && 'message' in error) {
    return `${error.name || 'Error'}: ${String(error.message).split('\n')[0]}`;
  }
  return String(error);
}

function emit(test) {
  test.emitted = true;
  const message = test.failed || (test.ended ? '' : crash || 'the test did not end');
  if (message && !test.skip && !test.todo) process.exitCode = 1;
  write({ file, names: [file, ...test.names], passed: !message, skip: test.skip, todo: test.todo,
          duration_ms: Date.now() - test.start, message });
}

// this file's own lines (a require stack's last entry) are miner's, not what tape on the file prints
const ownLines = (text) => text.split('\n').filter((line) => !line.includes(__filename)).join('\n');

function fileError(error) {
  crash = errorLine(error);
  const stack = ownLines(String((error && error.stack) || ''));
  write({ file, names: [file], passed: false, message: (stack.startsWith(crash) ? stack : `${crash}\n${stack}`).slice(0, 1000) });
  process.exitCode = 1;
}

function onRow(row) {
  if (row.type === 'test') {
    const parent = tests.get(row.parent);
    tests.set(row.id, { names: [...(parent ? parent.names : []), String(row.name)], failed: '', skip: !!row.skip,
                        todo: !!row.todo, start: Date.now(), ended: false, emitted: false });
  } else if (row.type === 'assert') {
    const test = tests.get(row.test);
    if (test && !row.ok && !row.skip && !row.todo && !test.failed) {
      test.failed = String(row.name || row.operator || 'not ok').slice(0, 1000);
    }
  } else if (row.type === 'end') {
    const test = tests.get(row.test);
    if (test && !test.emitted) { test.ended = true; emit(test); }
  }
}

let tape;
try {
  tape = require(require.resolve('tape', { paths: [root] }));
} catch (error) {
  fileError(error);
  process.exit();
}
tape.createStream({ objectMode: true }).on('data', onRow);
process.on('exit', () => { for (const test of tests.values()) if (!test.emitted) emit(test); });
process.on('uncaughtException', (error) => {
  // as node would: the error on stderr, exit 1; the tests it cut short carry its first line
  crash = errorLine(error);
  process.stderr.write(`${(error && error.stack) || error}\n`);
  process.exit(1);
});
try {
  for (const name of preload) require(require.resolve(name, { paths: [root] }));
  require(path.resolve(root, file));
} catch (error) {
  fileError(error);
}
