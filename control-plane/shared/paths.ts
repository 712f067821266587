import * as fs from 'node:fs';
import * as path from 'node:path';

/** The repository root, found the same way from sources (jest) and from compiled code in dist/. */
function findProjectRoot(): string {
  for (let dir = __dirname; dir !== path.dirname(dir); dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'proto')) && fs.existsSync(path.join(dir, 'package.json'))) return dir;
  }
  throw new Error(`cannot find the project root above ${__dirname}`);
}

export const PROJECT_ROOT = findProjectRoot();
export const projectPath = (...parts: string[]) => path.join(PROJECT_ROOT, ...parts);
