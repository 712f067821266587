import { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';
import { Keycloak, TestUser } from './keycloak';

/**
 * An MCP SDK OAuth client provider for the test realm's public client agent-cli (authorization code
 * with PKCE, RFC 8252 loopback redirect), whose "browser" is a script: when the SDK sends the user to
 * the authorization URL, the user signs in on Keycloak's login page at once and the code waits in
 * `pendingCode` for the test to hand to transport.finishAuth(). Everything else (discovery of the
 * gateway's metadata and Keycloak's, PKCE, the token request, the scope step-up) is the SDK's own.
 */
export class ScriptedBrowserOAuthProvider implements OAuthClientProvider {
  private savedTokens?: OAuthTokens;
  private verifier = '';
  /** The authorization code of the last sign-in, for transport.finishAuth(). */
  pendingCode?: string;
  /** Every authorization URL the SDK sent the user to (its scope shows what it asked for). */
  readonly authorizations: URL[] = [];

  constructor(
    private readonly idp: Keycloak,
    private readonly user: TestUser,
    readonly redirectUrl = 'http://127.0.0.1:18999/callback',
  ) {}

  get clientMetadata(): OAuthClientMetadata {
    return { client_name: 'e2e agent', redirect_uris: [this.redirectUrl], grant_types: ['authorization_code', 'refresh_token'], token_endpoint_auth_method: 'none' };
  }

  clientInformation(): OAuthClientInformationMixed {
    return { client_id: 'agent-cli' };
  }

  tokens(): OAuthTokens | undefined {
    return this.savedTokens;
  }

  /**
   * Keeps no refresh token: the SDK answers a scope challenge by refreshing when it can, and a refresh
   * keeps the token's scopes, so the step-up would fail where a user signing in again succeeds.
   */
  saveTokens(tokens: OAuthTokens): void {
    const { refresh_token: _refresh, ...kept } = tokens;
    this.savedTokens = kept;
  }

  async redirectToAuthorization(authorizationUrl: URL): Promise<void> {
    this.authorizations.push(authorizationUrl);
    const redirected = await this.idp.signIn(authorizationUrl, this.user);
    this.pendingCode = redirected.searchParams.get('code') ?? undefined;
  }

  saveCodeVerifier(codeVerifier: string): void {
    this.verifier = codeVerifier;
  }

  codeVerifier(): string {
    return this.verifier;
  }
}
