import * as fs from 'node:fs';
import { z } from 'zod';
import { registryDocumentSchema } from '../../control-plane/registry/model';
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
