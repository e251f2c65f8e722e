// Passkeys (WebAuthn): enrol one with user verification required, and approve with one.
//
// Approving with a passkey signs the same statement as an Ed25519 key does: the assertion's
// challenge is SHA-256(JCS(statement)), so the authenticator's signature covers every field
// of the statement (docs/approvals.md, "Passkeys"). The server sends the registration
// options and verifies both ceremonies; this module only talks to the authenticator.

import { canonicalBytes } from "./jcs.js";
import {
  ConsoleError,
  showProblem,
  b64url,
  consoleData,
  postJson,
  requestJson,
  say,
  showCredentials,
} from "./keys.js";

const BASE = "/console/credentials/passkeys";

function requireWebAuthn() {
  if (!window.PublicKeyCredential || !PublicKeyCredential.parseCreationOptionsFromJSON) {
    throw new ConsoleError("this browser cannot use passkeys (WebAuthn Level 3 JSON)");
  }
}

/** Enrol a passkey for the signed-in approver; returns the server's record of it. */
export async function enrolPasskey(label) {
  requireWebAuthn();
  const { options } = await postJson(`${BASE}/options`, {});
  const publicKey = PublicKeyCredential.parseCreationOptionsFromJSON(options);
  // Whatever the server sent, this console never enrols a passkey that skips verification.
  publicKey.authenticatorSelection = {
    ...(publicKey.authenticatorSelection || {}),
    userVerification: "required",
  };
  const credential = await navigator.credentials.create({ publicKey });
  return postJson(BASE, { credential: credential.toJSON(), label });
}

/**
 * The approvals request body for a statement signed with one of the approver's passkeys.
 * ``buildStatement(keyId)`` makes the statement once the passkey (its key id) is chosen:
 * the key id is part of what the challenge commits to.
 */
export async function passkeyAssertion(buildStatement) {
  requireWebAuthn();
  const { passkeys } = await requestJson("/console/credentials");
  const usable = (passkeys || [])
    .filter((passkey) => passkey.active)
    .sort((a, b) => b.created_at.localeCompare(a.created_at));
  if (usable.length === 0) {
    throw new ConsoleError(
      "no active passkey of yours: enrol one on the keys page (an admin approves it)",
    );
  }
  const passkey = usable[0]; // the most recently enrolled one
  const statement = buildStatement(passkey.key_id);
  const challenge = await crypto.subtle.digest("SHA-256", canonicalBytes(statement));
  const credential = await navigator.credentials.get({
    publicKey: PublicKeyCredential.parseRequestOptionsFromJSON({
      challenge: b64url(challenge),
      rpId: passkey.rp_id,
      allowCredentials: [{ type: "public-key", id: passkey.credential_id }],
      userVerification: "required",
      timeout: 120000,
    }),
  });
  const { id, response } = credential.toJSON();
  return {
    statement,
    webauthn: {
      credential_id: id,
      authenticator_data: response.authenticatorData,
      client_data_json: response.clientDataJSON,
      signature: response.signature,
    },
  };
}

function wireKeysPage() {
  const button = document.getElementById("enrol-passkey");
  const approver = consoleData();
  if (!button || !approver) {
    return;
  }
  button.addEventListener("click", async (event) => {
    event.preventDefault();
    try {
      const enrolled = await enrolPasskey("passkey enrolled in the console");
      say(`passkey ${enrolled.key_id} enrolled; an admin must approve it before it signs`);
    } catch (error) {
      showProblem(document.getElementById("keys-status"), error);
    }
    await showCredentials(approver);
  });
}

wireKeysPage();
