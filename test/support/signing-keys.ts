import * as fs from 'node:fs';
import { GatewayIR } from '../../control-plane/ir/gateway-ir';
import { projectPath } from '../../control-plane/shared/paths';
import { SigningKeys } from '../../control-plane/xds/translate/auth';

/** The test key set (test/fixtures/keys/jwks.json) for every issuer the registry names, as if the control plane had read them. */
export function fixtureKeysFor(ir: GatewayIR): SigningKeys {
  const jwks = JSON.stringify(JSON.parse(fs.readFileSync(projectPath('test', 'fixtures', 'keys', 'jwks.json'), 'utf8')));
  return new Map(ir.routes.flatMap((route) => (route.auth ? [[route.auth.keys.name, jwks] as const] : [])));
}
