// A real OpenID provider (panva's OpenID-certified oidc-provider) for draftgate's tests.
//
// It issues JWT access tokens by the client credentials grant, bound to the resource the
// client names (RFC 8707), carrying draftgate's claims from the client's own metadata.
// Two issuers run in this process on two ports and share their signing keys, so a token
// whose signature verifies but whose issuer is wrong can be produced. POST /__rotate on the
// main issuer replaces the signing key of both (the old one leaves their JWKS at once).
//
// Configuration comes as JSON in the first argument: {"clients": [...], "resources": [...]}
// (no resources: any http(s) URL is a resource, so each test server names its own). A
// client's "ttl_seconds" sets the lifetime of its access tokens.
// Once listening, one JSON line is printed: {"issuer": ..., "other_issuer": ...}.
import http from 'node:http';

import { exportJWK, generateKeyPair } from 'jose';
import Provider from 'oidc-provider';

const config = JSON.parse(process.argv[2] ?? '{}');
const clients = config.clients ?? [];
const resources = new Set(config.resources ?? []);
const CLAIMS = ['draftgate_tenant', 'draftgate_role', 'draftgate_on_behalf_of', 'draftgate_subject'];
let generation = 0;

async function signingKeys() {
  generation += 1;
  const { privateKey } = await generateKeyPair('RS256', { extractable: true });
  const jwk = await exportJWK(privateKey);
  return [{ ...jwk, kid: `test-key-${generation}-${Date.now()}`, alg: 'RS256', use: 'sig' }];
}

function buildProvider(issuer, keys) {
  const provider = new Provider(issuer, {
    clients: clients.map(({ ttl_seconds: _ttl, ...client }) => ({
      grant_types: ['client_credentials'],
      redirect_uris: [],
      response_types: [],
      ...client,
    })),
    extraClientMetadata: { properties: CLAIMS },
    jwks: { keys },
    scopes: ['openid', 'draftgate', 'other'],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: async () => undefined,
        useGrantedResource: async () => false,
        getResourceServerInfo: async (_ctx, resource, client) => {
          const known = resources.size ? resources.has(resource) : /^https?:\/\//.test(resource);
          if (!known) throw new Provider.errors.InvalidTarget();
          const settings = clients.find((c) => c.client_id === client.clientId) ?? {};
          return {
            scope: 'draftgate other',
            audience: resource,
            accessTokenFormat: 'jwt',
            accessTokenTTL: settings.ttl_seconds ?? 600,
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
    extraTokenClaims: async (_ctx, token) => {
      const client = await provider.Client.find(token.clientId);
      const claims = {};
      for (const name of CLAIMS) {
        if (client?.[name] !== undefined) claims[name] = client[name];
      }
      return claims;
    },
  });
  return provider.callback();
}

async function listen(server) {
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${server.address().port}`;
}

let handler = null;
let otherHandler = null;
const main = http.createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/__rotate') {
    rotate().then(() => res.writeHead(204).end(), (error) => res.writeHead(500).end(String(error)));
    return;
  }
  handler(req, res);
});
const other = http.createServer((req, res) => otherHandler(req, res));
const issuer = await listen(main);
const otherIssuer = await listen(other);

async function rotate() {
  const rotated = await signingKeys();
  handler = buildProvider(issuer, rotated);
  otherHandler = buildProvider(otherIssuer, rotated);
}

const keys = await signingKeys();
handler = buildProvider(issuer, keys);
otherHandler = buildProvider(otherIssuer, keys); // same keys: only the issuer differs
process.stdout.write(`${JSON.stringify({ issuer, other_issuer: otherIssuer })}\n`);
process.on('SIGTERM', () => process.exit(0));
