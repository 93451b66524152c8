// miner's reporter for node's test runner (node --test --test-reporter=<this file>): one JSON
// object a line for each finished test, with the names of the tests it is nested in, so that
// miner reads per-test results from events instead of a human-readable report. Node >= 18.15.
export default async function* reporter(source) {
  const names = [];
  for await (const event of source) {
    const data = event.data || {};
    if (event.type === 'test:start') {
      names.length = data.nesting;
      names.push(data.name);
    } else if (event.type === 'test:pass' || event.type === 'test:fail') {
      names.length = data.nesting;
      names.push(data.name);
      const error = data.details && data.details.error;
      const cause = error && (error.cause || error);
      yield JSON.stringify({
        file: data.file || null,
        names: names.slice(),
        passed: event.type === 'test:pass',
        kind: (data.details && data.details.type) || 'test',
        skip: data.skip !== undefined && data.skip !== false,
        todo: data.todo !== undefined && data.todo !== false,
        duration_ms: (data.details && data.details.duration_ms) || 0,
        message: cause ? String(cause.message || cause) : '',
      }) + '\n';
    }
  }
}
