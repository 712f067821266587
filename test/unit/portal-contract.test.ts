import * as fs from 'node:fs';
import { parse } from 'yaml';
import { z } from 'zod';
import { registryDocumentSchema } from '../../control-plane/registry/model';
import { validateRegistry } from '../../control-plane/registry/validate';
import { projectPath } from '../../control-plane/shared/paths';

/** The published JSON schema of the Portal contract is generated from the zod model it is checked with. */
describe('docs/portal-registry.schema.json', () => {
  it('matches the registry model (UPDATE_GOLDEN=1 regenerates it)', () => {
    const schema = { ...z.toJSONSchema(registryDocumentSchema, { io: 'input' }), title: 'MCP federation gateway registry document' };
    const rendered = `${JSON.stringify(schema, null, 2)}\n`;
    const file = projectPath('docs', 'portal-registry.schema.json');
    if (process.env.UPDATE_GOLDEN) fs.writeFileSync(file, rendered);
    expect(rendered).toBe(fs.readFileSync(file, 'utf8'));
  });
});

describe('docs/portal-contract.md', () => {
  it('shows a document the gateway accepts whole', () => {
    const text = fs.readFileSync(projectPath('docs', 'portal-contract.md'), 'utf8');
    const example = /## Document\s+```json\n([\s\S]*?)\n```/.exec(text);
    expect(example).not.toBeNull();
    const { registry, problems } = validateRegistry(JSON.parse(example![1]));
    expect(problems).toEqual([]);
    expect(registry.routes.map((route) => route.key)).toEqual(['ops']);
  });
});

describe('docs/registry.md', () => {
  it('shows a registry file the gateway accepts whole', () => {
    const text = fs.readFileSync(projectPath('docs', 'registry.md'), 'utf8');
    const example = /```yaml\n([\s\S]*?)\n```/.exec(text);
    expect(example).not.toBeNull();
    const { registry, problems } = validateRegistry(parse(example![1]));
    expect(problems).toEqual([]);
    expect(registry.routes.map((route) => route.toolServices.map((service) => service.id))).toEqual([['weather', 'jobs-prod']]);
  });
});
