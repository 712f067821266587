import { readRegistryDocument, RegistryFileError } from './file-source';
import { Registry } from './model';
import { describeProblem, validateRegistry } from './validate';

export { RegistryFileError };

/**
 * Reads a registry file for the commands that take one (validate, render, diff). There the person
 * running the command owns the file, so any problem is fatal and every problem is listed at once.
 */
export function loadRegistryFile(file: string): Registry {
  const { registry, problems } = validateRegistry(readRegistryDocument(file).body);
  if (problems.length > 0) {
    throw new RegistryFileError(
      `registry file ${file} is invalid:\n${problems.map((problem) => `  - ${describeProblem(problem)}`).join('\n')}`,
    );
  }
  return registry;
}
