// miner's reporter for mocha, in two roles in one file.
//
// Run by node, it is the driver: it runs one test file under mocha's own command line, with this
// file as mocha's reporter and no config file of the project's read, and appends one JSON object a
// test to the report, in the shape of miner's node --test reporter:
//   {"file": "test/parse.js", "names": ["test/parse.js", "suite", "test"], "passed": true, ...}
//   node mocha-reporter.cjs REPORT FILE [MOCHA_OPTION ...]
// mocha is the one linked into the folder above the project (miner's, /sandbox/node_modules/mocha),
// else the project's. A file that fails before its tests run (a require that throws) is its own
// entry (names: [file]) carrying the first error line mocha or node printed.
//
// Loaded by mocha (--reporter), it is the reporter: Mocha.Runner's test events, a test's id from
// test.titlePath(). A test a failed hook kept from running gets that hook's error.
'use strict';
const fs = require('fs');
const path = require('path');

const MESSAGE_CHARS = 1000;
const ERROR_LINE = /[A-Za-z]*Error\b[^\n]*/;

function errorLine(error) {
  if (!error || typeof error !== 'object') return String(error);
  const message = String(error.message || '');
  const stack = String(error.stack || '');
  // the line mocha prints for a failure: the stack up to the end of its first message line
  const first = message.split('\n')[0];
  const at = first ? stack.indexOf(first) : -1;
  return at >= 0 ? stack.slice(0, at + first.length).split('\n').pop() : `${error.name || 'Error'}: ${first}`;
}

function reporter(runner) {
  const constants = (runner.constructor && runner.constructor.constants) || {};
  const on = (name, fallback, handler) => runner.on(constants[name] || fallback, handler);
  const report = process.env.MINER_MOCHA_REPORT;
  const file = process.env.MINER_MOCHA_FILE;
  const out = fs.openSync(report, 'a');
  const started = new Map();
  const emitted = new Set();
  const hookErrors = new Map();
  let tests = [];

  const titles = (test) => (typeof test.titlePath === 'function' ? test.titlePath()
    : [...(test.parent && test.parent.title ? titles(test.parent) : []), test.title]);
  const emit = (test, fields) => {
    if (emitted.has(test)) return;
    emitted.add(test);
    const entry = { file, names: [file, ...titles(test).map(String)], passed: false, skip: false, todo: false,
                    duration_ms: started.has(test) ? Date.now() - started.get(test) : 0, message: '', ...fields };
    entry.message = String(entry.message).slice(0, MESSAGE_CHARS);
    fs.writeSync(out, JSON.stringify(entry) + '\n');
    if (!entry.passed && !entry.skip) process.stdout.write(`not ok ${entry.names.slice(1).join(' :: ')}: ${entry.message}\n`);
  };
  const all = (suite) => [...suite.tests, ...suite.suites.flatMap(all)];
  const hookError = (test) => {
    for (let suite = test.parent; suite; suite = suite.parent) if (hookErrors.has(suite)) return hookErrors.get(suite);
    return '';
  };
  const unfinished = () => {
    for (const test of tests) if (!emitted.has(test)) emit(test, { message: hookError(test) || 'the test did not run' });
  };

  on('EVENT_RUN_BEGIN', 'start', () => { tests = all(runner.suite); });
  on('EVENT_TEST_BEGIN', 'test', (test) => started.set(test, Date.now()));
  on('EVENT_TEST_PASS', 'pass', (test) => emit(test, { passed: true }));
  on('EVENT_TEST_PENDING', 'pending', (test) => emit(test, { skip: true }));
  on('EVENT_TEST_FAIL', 'fail', (test, error) => {
    if (test.type === 'hook') hookErrors.set(test.parent, errorLine(error));
    else emit(test, { message: errorLine(error) });
  });
  on('EVENT_RUN_END', 'end', unfinished);
  process.on('exit', unfinished);
}

function mochaArgs(version) {
  const major = Number(String(version).split('.')[0]);
  // what reads the project's config: mocha.opts (before 8), .mocharc.* and package.json (6 and later)
  if (major < 6) return ['--opts', '/dev/null'];
  return major < 8 ? ['--no-config', '--no-package', '--no-opts'] : ['--no-config', '--no-package'];
}

// mocha's folder as node finds it from `base` (node_modules folders upward); its package.json is
// read from there, not resolved, since a package's "exports" may not export it
function locate(base) {
  for (let dir = base; ; dir = path.dirname(dir)) {
    const home = path.join(dir, 'node_modules', 'mocha');
    if (fs.existsSync(path.join(home, 'package.json'))) return home;
    if (dir === path.dirname(dir)) return null;
  }
}

function drive() {
  const { spawn } = require('child_process');
  const [report, file, ...options] = process.argv.slice(2);
  const root = process.cwd();
  const home = locate(path.dirname(root)) || locate(root);
  const fileError = (message) => {
    fs.appendFileSync(report, JSON.stringify({ file, names: [file], passed: false, message: message.slice(0, MESSAGE_CHARS) }) + '\n');
  };
  if (!home) {
    fileError("Error: Cannot find module 'mocha'");
    process.exit(1);
  }
  const meta = JSON.parse(fs.readFileSync(path.join(home, 'package.json'), 'utf8'));
  const bin = typeof meta.bin === 'string' ? meta.bin : (meta.bin || {}).mocha || 'bin/mocha';
  const exit = Number(String(meta.version).split('.')[0]) >= 4 ? ['--exit'] : [];
  const argv = [path.join(home, bin), ...mochaArgs(meta.version), ...exit, '--reporter', __filename, ...options, file];
  const child = spawn(process.execPath, argv, {
    cwd: root, stdio: ['ignore', 'inherit', 'pipe'],
    env: { ...process.env, MINER_MOCHA_REPORT: report, MINER_MOCHA_FILE: file },
  });
  let errors = '';
  child.stderr.on('data', (chunk) => {
    process.stderr.write(chunk);
    if (errors.length < 65536) errors += chunk.toString();
  });
  child.on('close', (code) => {
    const written = fs.existsSync(report) && fs.readFileSync(report, 'utf8').split('\n')
      .some((line) => line.includes(JSON.stringify(file)));
    // a file of no tests (a helper the spec's glob takes in) exits 0 and has no entry
    if (!written && code !== 0) {
      const match = ERROR_LINE.exec(errors.replace(/\x1b\[[0-9;]*m/g, ''));
      fileError(match ? match[0] : `mocha stopped before running the file (exit ${code})`);
    }
    process.exit(code === null ? 1 : code);
  });
}

if (require.main === module) drive();
else module.exports = reporter;
