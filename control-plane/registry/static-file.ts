import * as fs from 'node:fs';
import { Document, LineCounter, isMap, isScalar, isSeq, parseDocument } from 'yaml';
import { RegistryFileError } from './file-source';
import { Registry } from './model';
import { DEFAULT_REGISTRY_POLICY, DocumentPath, RegistryPolicy, RegistryProblem, describeProblem, validateRegistry } from './validate';

export { RegistryFileError };

/** A problem of a registry file with the line and column (1-based) of the node it is about. */
export interface FileProblem {
  line: number;
  column: number;
  message: string;
}

/**
 * The offset of the node at `path`: the value there, the key itself for an unknown key, or the
 * nearest enclosing node that exists (a missing field is reported at the object that lacks it).
 */
function offsetOf(document: Document, path: DocumentPath, atKey: boolean): number {
  let node: unknown = document.contents;
  let offset = document.contents?.range?.[0] ?? 0;
  for (const [index, part] of path.entries()) {
    if (isMap(node)) {
      const pair = node.items.find((item) => (isScalar(item.key) ? item.key.value : item.key) === part);
      const keyStart = isScalar(pair?.key) ? pair.key.range?.[0] : undefined;
      if (!pair || keyStart === undefined) break;
      const value = pair.value as { range?: [number, number, number] } | null;
      if (atKey && index === path.length - 1) return keyStart;
      node = pair.value;
      offset = value?.range?.[0] ?? keyStart;
    } else if (isSeq(node) && typeof part === 'number' && node.items[part]) {
      node = node.items[part];
      offset = (node as { range?: [number, number, number] }).range?.[0] ?? offset;
    } else {
      break;
    }
  }
  return offset;
}

/**
 * Reads and validates a registry file, YAML or JSON (JSON goes through the same YAML parser, which
 * keeps every node's position), and places each problem at its line and column.
 */
export function checkRegistryFile(file: string, policy: RegistryPolicy = DEFAULT_REGISTRY_POLICY): { registry: Registry; problems: FileProblem[] } {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new RegistryFileError(`cannot read registry file ${file}: ${(error as Error).message}`);
  }
  const lineCounter = new LineCounter();
  const document = parseDocument(text, { lineCounter, prettyErrors: false });
  const at = (offset: number) => {
    const { line, col } = lineCounter.linePos(offset);
    return { line, column: col };
  };
  if (document.errors.length > 0) {
    return {
      registry: { routes: [] },
      problems: document.errors.map((error) => ({ ...at(error.pos[0]), message: `not valid YAML: ${error.message.split('\n')[0]}` })),
    };
  }
  const { registry, problems } = validateRegistry(document.toJS(), policy);
  return {
    registry,
    problems: problems.map((problem: RegistryProblem) => ({
      ...at(offsetOf(document, problem.path, problem.unknownKey === true)),
      message: describeProblem(problem),
    })),
  };
}

export function formatFileProblem(file: string, problem: FileProblem): string {
  return `${file}:${problem.line}:${problem.column}: ${problem.message}`;
}

/**
 * Reads a registry file for the commands that take one (validate, render, diff, up, a control plane
 * started on a file). There the person running the command owns the file, so any problem is fatal
 * and every problem is listed at once, each with its line and column.
 */
export function loadRegistryFile(file: string, policy: RegistryPolicy = DEFAULT_REGISTRY_POLICY): Registry {
  const { registry, problems } = checkRegistryFile(file, policy);
  if (problems.length > 0) {
    throw new RegistryFileError(`registry file ${file} is invalid:\n${problems.map((problem) => `  ${formatFileProblem(file, problem)}`).join('\n')}`);
  }
  return registry;
}
