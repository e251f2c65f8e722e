// The approver's Ed25519 key in the browser, and the console's JSON requests.
//
// The private key is a non-extractable CryptoKey kept in IndexedDB (db "draftgate", store
// "keys", one record per tenant and subject of this origin): scripts of this origin can
// sign with it, nothing can read it back, and the server never sees it. An imported PEM is
// read once to learn its public half (key id), then imported again non-extractable; only
// that second key is stored.

import { canonicalBytes, sha256Hex } from "./jcs.js";

const DB_NAME = "draftgate";
const STORE = "keys";
const ED25519 = { name: "Ed25519" };

// --- base64url (no padding), as service.signing writes it ------------------------------

export function b64url(bytes) {
  let binary = "";
  for (const byte of new Uint8Array(bytes)) {
    binary += String.fromCharCode(byte);
  }
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

export function b64urlDecode(text) {
  const base64 = text.replaceAll("-", "+").replaceAll("_", "/");
  const binary = atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(binary, (char) => char.charCodeAt(0));
}

// --- requests to the console (same origin, session cookie, CSRF header) ----------------

export class ConsoleError extends Error {
  constructor(message, { status = 0, code = null } = {}) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * A refusal in words for a person: the server's message, then its code, small (the code is
 * what to quote to an operator; the sentence is what to read). Built with textContent.
 */
export function showProblem(target, error) {
  if (!target) {
    return;
  }
  target.textContent = error instanceof Error ? error.message : String(error);
  if (error instanceof ConsoleError && error.code) {
    const code = document.createElement("small");
    code.className = "code muted";
    code.textContent = error.code;
    target.append(" ", code);
  }
}

function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

export async function requestJson(url, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") {
    headers["X-CSRF-Token"] = csrfToken();
  }
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
  }
  const response = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    redirect: "error", // a redirect (say, to sign-in) is a failure here, not a page to parse
  });
  let payload = null;
  try {
    payload = await response.json();
  } catch {
    payload = null;
  }
  if (!response.ok) {
    const code = payload && typeof payload.code === "string" ? payload.code : null;
    const detail = payload && (payload.detail || payload.title);
    const text = typeof detail === "string" ? detail : `The server answered HTTP ${response.status}.`;
    throw new ConsoleError(text, { status: response.status, code });
  }
  return payload;
}

export const postJson = (url, body) => requestJson(url, { method: "POST", body });

// --- IndexedDB ------------------------------------------------------------------------

function openDb() {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open(DB_NAME, 1);
    request.onupgradeneeded = () => {
      request.result.createObjectStore(STORE, { keyPath: ["tenant", "subject"] });
    };
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

async function inStore(mode, use) {
  const db = await openDb();
  try {
    return await new Promise((resolve, reject) => {
      const transaction = db.transaction(STORE, mode);
      const request = use(transaction.objectStore(STORE));
      transaction.oncomplete = () => resolve(request.result);
      transaction.onerror = () => reject(transaction.error);
      transaction.onabort = () => reject(transaction.error);
    });
  } finally {
    db.close();
  }
}

export function storedKey(tenant, subject) {
  return inStore("readonly", (store) => store.get([tenant, subject]));
}

function storeKey(record) {
  return inStore("readwrite", (store) => store.put(record));
}

// --- keys -----------------------------------------------------------------------------

export async function keyIdFor(rawPublicKey) {
  return `ed25519-${(await sha256Hex(rawPublicKey)).slice(0, 16)}`;
}

function pkcs8FromPem(text) {
  if (text.includes("ENCRYPTED PRIVATE KEY")) {
    throw new ConsoleError(
      "this key file is encrypted with a passphrase, which the browser cannot open: " +
        "import an unencrypted copy (e.g. on a disk you then wipe) or generate a key here",
    );
  }
  const match = /-----BEGIN PRIVATE KEY-----([A-Za-z0-9+/=\s]+)-----END PRIVATE KEY-----/.exec(
    text,
  );
  if (!match) {
    throw new ConsoleError("not a PKCS#8 PEM private key (-----BEGIN PRIVATE KEY-----)");
  }
  return Uint8Array.from(atob(match[1].replace(/\s+/g, "")), (char) => char.charCodeAt(0));
}

/** Import a PKCS#8 PEM Ed25519 key for (tenant, subject); returns the stored record. */
export async function importPem(text, { tenant, subject, expectedKeyId = "" }) {
  const der = pkcs8FromPem(text);
  try {
    let probe;
    try {
      probe = await crypto.subtle.importKey("pkcs8", der, ED25519, true, ["sign"]);
    } catch {
      throw new ConsoleError("not an Ed25519 private key");
    }
    // The JWK form of a private key carries its public half (x): the key id comes from it.
    const publicKey = (await crypto.subtle.exportKey("jwk", probe)).x;
    const keyId = await keyIdFor(b64urlDecode(publicKey));
    if (expectedKeyId && expectedKeyId !== keyId) {
      throw new ConsoleError(`this file holds key ${keyId}, not ${expectedKeyId}`);
    }
    const privateKey = await crypto.subtle.importKey("pkcs8", der, ED25519, false, ["sign"]);
    const record = {
      tenant,
      subject,
      key_id: keyId,
      public_key: publicKey,
      private_key: privateKey,
      origin: location.origin,
      source: "imported",
      stored_at: new Date().toISOString(),
    };
    await storeKey(record);
    return record;
  } finally {
    der.fill(0); // the only copy of the secret outside the CryptoKey
  }
}

/** Generate a key pair here, ask the console to enrol its public key, then keep it. */
export async function generateAndEnrol({ tenant, subject, label }) {
  const pair = await crypto.subtle.generateKey(ED25519, false, ["sign", "verify"]);
  const publicKey = b64url(await crypto.subtle.exportKey("raw", pair.publicKey));
  const keyId = await keyIdFor(b64urlDecode(publicKey));
  const enrolment = await postJson("/console/credentials/enrolments", {
    public_key: publicKey,
    label,
  });
  const record = {
    tenant,
    subject,
    key_id: keyId,
    public_key: publicKey,
    private_key: pair.privateKey,
    origin: location.origin,
    source: "generated",
    enrolment_id: enrolment.enrolment_id ?? null,
    stored_at: new Date().toISOString(),
  };
  await storeKey(record);
  return record;
}

/** base64url of the Ed25519 signature over ``bytes`` with a stored key. */
export async function signWith(record, bytes) {
  return b64url(await crypto.subtle.sign(ED25519, record.private_key, bytes));
}

/**
 * Sign ``statement`` with this browser's key of the signed-in approver (its ``key_id`` set to
 * that key's) and post it with the signature to ``url``; null when this browser holds no key.
 */
export async function signAndPost(url, statement) {
  const data = consoleData();
  const key = await storedKey(data.tenant, data.subject);
  if (!key) {
    return null;
  }
  const signed = { ...statement, key_id: key.key_id };
  return postJson(url, { statement: signed, signature: await signWith(key, canonicalBytes(signed)) });
}

// --- the keys page --------------------------------------------------------------------

/** The signed-in approver, from the page's JSON data block. */
export function consoleData() {
  const element = document.getElementById("console-data");
  if (!element) {
    return null;
  }
  const data = JSON.parse(element.textContent);
  return { ...data, subject: data.subject ?? data.approver };
}

export function say(text) {
  const status = document.getElementById("keys-status");
  if (status) {
    status.textContent = text;
  }
}

function item(text) {
  const li = document.createElement("li");
  li.textContent = text;
  return li;
}

/** What this browser holds and what the server knows of the approver's credentials. */
export async function showCredentials(approver) {
  const list = document.getElementById("keys-list");
  if (!list) {
    return;
  }
  const record = await storedKey(approver.tenant, approver.subject);
  const items = [
    item(
      record
        ? `In this browser: ${record.key_id} (${record.source} ${record.stored_at})`
        : "In this browser: no signing key",
    ),
  ];
  try {
    const mine = await requestJson("/console/credentials");
    for (const key of mine.keys) {
      items.push(item(`Key ${key.key_id}: ${key.active ? "active" : "revoked"}`));
    }
    for (const passkey of mine.passkeys) {
      items.push(item(`Passkey ${passkey.key_id}: ${passkey.active ? "active" : "revoked"}`));
    }
    for (const enrolment of mine.enrolments.filter((e) => e.status === "pending")) {
      items.push(item(`Enrolment of ${enrolment.kind} ${enrolment.key_id}: waits for an admin`));
    }
  } catch (error) {
    const problem = item("");
    showProblem(problem, error);
    items.push(problem);
  }
  const ul = document.createElement("ul");
  ul.replaceChildren(...items);
  list.replaceChildren(ul);
}

async function onImport(approver) {
  const file = document.getElementById("key-file").files[0];
  if (!file) {
    say("choose a key file first");
    return;
  }
  const expectedKeyId = (document.getElementById("key-id")?.value || "").trim();
  const record = await importPem(await file.text(), { ...approver, expectedKeyId });
  document.getElementById("key-file").value = "";
  say(`imported ${record.key_id}: this browser signs with it from now on`);
}

async function onGenerate(approver) {
  const record = await generateAndEnrol({ ...approver, label: "generated in the browser" });
  say(`generated ${record.key_id}; enrolment requested: an admin must approve it`);
}

function guarded(approver, handler) {
  return async (event) => {
    event.preventDefault();
    try {
      await handler(approver);
    } catch (error) {
      showProblem(document.getElementById("keys-status"), error);
    }
    await showCredentials(approver);
  };
}

function wireKeysPage() {
  const approver = consoleData();
  if (!approver || !document.getElementById("key-file")) {
    return;
  }
  const importButton = document.getElementById("import-key");
  if (importButton) {
    importButton.addEventListener("click", guarded(approver, onImport));
  } else {
    document.getElementById("key-file").addEventListener("change", guarded(approver, onImport));
  }
  document
    .getElementById("generate-key")
    ?.addEventListener("click", guarded(approver, onGenerate));
  showCredentials(approver);
}

wireKeysPage();
