/**
 * Ends the run with the plain closing line CI reads ("jest: N passed, N failed, N skipped"),
 * since jest's own summary is not in that shape.
 */
class ClosingLineReporter {
  onRunComplete(_contexts, results) {
    const skipped = results.numPendingTests + results.numTodoTests;
    process.stdout.write(`jest: ${results.numPassedTests} passed, ${results.numFailedTests} failed, ${skipped} skipped\n`);
  }
}
module.exports = ClosingLineReporter;
