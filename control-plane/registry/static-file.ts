import * as fs from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { Registry } from './model';
import { describeProblem, validateRegistry } from './validate';

export class RegistryFileError extends Error {}

/**
 * Reads the static YAML registry (ADR-0041 phase F1). Unlike the Portal, a local file is fixed by
 * the person running the gateway, so any problem is fatal and every problem is listed at once.
 */
export function loadRegistryFile(file: string): Registry {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new RegistryFileError(`cannot read registry file ${file}: ${(error as Error).message}`);
  }
  let document: unknown;
  try {
    document = parseYaml(text);
  } catch (error) {
    throw new RegistryFileError(`registry file ${file} is not valid YAML: ${(error as Error).message}`);
  }
  const { registry, problems } = validateRegistry(document);
  if (problems.length > 0) {
    throw new RegistryFileError(
      `registry file ${file} is invalid:\n${problems.map((problem) => `  - ${describeProblem(problem)}`).join('\n')}`,
    );
  }
  return registry;
}
