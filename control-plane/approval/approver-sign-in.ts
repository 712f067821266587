import type * as OpenIdClient from 'openid-client' with { 'resolution-mode': 'import' };

/**
 * Approvers sign in at the identity provider with the authorization code flow and PKCE (S256), by
 * openid-client: discovery, the authorization URL, the code exchange and the ID token's checks
 * (issuer, audience, signature, nonce, expiry) are the library's.
 */

export interface SignInSettings {
  /** The OpenID Connect issuer approvers sign in at (e.g. a Keycloak realm). */
  issuer: string;
  clientId: string;
  /** A confidential client's secret; none: a public client (PKCE alone). */
  clientSecret?: string;
  /** The ID token claim holding the approver's groups. */
  groupsClaim: string;
}

export interface SignedInApprover {
  issuer: string;
  subject: string;
  name?: string;
  groups: string[];
}

/**
 * openid-client is an ES module only; Node 22.12+ loads it with require. Loaded on the first sign-in,
 * so that nothing else in the sidecar depends on it.
 */
const openIdClient = (): typeof OpenIdClient => require('openid-client') as typeof OpenIdClient;

export class ApproverSignIn {
  private configuration?: Promise<OpenIdClient.Configuration>;

  constructor(private readonly settings: SignInSettings) {}

  /** Discovery once it succeeded; a failed one is tried again at the next sign-in (the IdP may have been down). */
  private config(): Promise<OpenIdClient.Configuration> {
    if (!this.configuration) {
      const oidc = openIdClient();
      const { issuer, clientId, clientSecret } = this.settings;
      // Plain http is refused by default; an operator who names an http issuer (a loopback IdP) means it.
      const options = new URL(issuer).protocol === 'http:' ? { execute: [oidc.allowInsecureRequests] } : undefined;
      this.configuration = oidc.discovery(new URL(issuer), clientId, clientSecret, clientSecret ? undefined : oidc.None(), options);
      this.configuration.catch(() => {
        this.configuration = undefined;
      });
    }
    return this.configuration;
  }

  newVerifier(): string {
    return openIdClient().randomPKCECodeVerifier();
  }

  async authorizationUrl(redirectUri: string, state: string, nonce: string, verifier: string): Promise<URL> {
    const oidc = openIdClient();
    return oidc.buildAuthorizationUrl(await this.config(), {
      redirect_uri: redirectUri,
      scope: 'openid profile',
      state,
      nonce,
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
    });
  }

  /** The approver of a callback URL, once the code is exchanged and the ID token verified. */
  async finish(callbackUrl: URL, expected: { state: string; nonce: string; verifier: string }): Promise<SignedInApprover> {
    const tokens = await openIdClient().authorizationCodeGrant(await this.config(), callbackUrl, {
      pkceCodeVerifier: expected.verifier,
      expectedState: expected.state,
      expectedNonce: expected.nonce,
      idTokenExpected: true,
    });
    const claims = tokens.claims();
    if (!claims) throw new Error('the identity provider returned no ID token');
    const groups = claims[this.settings.groupsClaim];
    const name = claims.preferred_username;
    return {
      issuer: claims.iss,
      subject: claims.sub,
      ...(typeof name === 'string' ? { name } : {}),
      groups: Array.isArray(groups) ? groups.filter((group): group is string => typeof group === 'string') : typeof groups === 'string' ? [groups] : [],
    };
  }
}
