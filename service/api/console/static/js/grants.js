// The standing grants page: write the terms, read the server's statement in words, sign it
// with this browser's key, record it.
//
// The browser signs only what was asked: a statement whose limits differ from the form's
// (a member added, dropped or changed) is refused before anything is signed, as the CLI's
// `grants create` refuses it.

import { postJson, showProblem, signAndPost } from "./keys.js";
import { minorUnits } from "./money.js";

const FIXED = new Set(["type", "tenant", "approver", "key_id", "not_before", "expires_at", "issued_at"]);
let offer = null;

function element(id) {
  return document.getElementById(id);
}

function status(text) {
  element("grant-status").textContent = text;
}

function terms() {
  const value = (id) => element(id).value.trim();
  const currency = value("grant-currency").toUpperCase();
  const asked = {
    action: value("grant-action"),
    duration_seconds: Number(value("grant-hours")) * 3600,
    max_amount_minor: minorUnits(value("grant-max"), currency, "Up to, per draft"),
    cap_minor: minorUnits(value("grant-cap"), currency, "At most, per day"),
    source_ref: value("grant-source") || null,
    agent: value("grant-agent") || null,
    max_uses: value("grant-uses") ? Number(value("grant-uses")) : null,
  };
  if (asked.cap_minor !== null) {
    asked.cap_window_seconds = 86400;
  }
  if (asked.max_amount_minor !== null || asked.cap_minor !== null) {
    asked.currency = currency;
  }
  return Object.fromEntries(Object.entries(asked).filter(([, v]) => v !== null));
}

function differences(asked, statement) {
  const limits = Object.keys(asked).filter((name) => name !== "duration_seconds");
  const changed = limits.filter((name) => statement[name] !== asked[name]);
  const added = Object.keys(statement).filter((name) => !FIXED.has(name) && !(name in asked));
  return [...changed, ...added];
}

async function preview() {
  offer = null;
  element("grant-offer").hidden = true;
  let asked;
  try {
    asked = terms();
  } catch (error) {
    status(error.message);
    return;
  }
  status("asking for the statement to sign…");
  try {
    const offered = await postJson("/console/grants/statement", asked);
    const mismatched = differences(asked, offered.statement);
    if (mismatched.length) {
      status(`not signed: the server's statement differs from your terms (${mismatched.join(", ")})`);
      return;
    }
    offer = offered;
    element("grant-words").textContent = offered.words;
    element("grant-offer").hidden = false;
    status("");
  } catch (error) {
    showProblem(element("grant-status"), error);
  }
}

async function sign() {
  if (!offer) {
    return;
  }
  element("grant-sign").disabled = true;
  status("sending your signed grant…");
  try {
    const created = await signAndPost("/console/grants", offer.statement);
    if (created === null) {
      status("no signing key in this browser: import or generate one first (Keys & passkeys)");
      element("grant-sign").disabled = false;
      return;
    }
    status(`granted ${created.grant_id}`);
    window.location.reload();
  } catch (error) {
    showProblem(element("grant-status"), error);
    element("grant-sign").disabled = false;
  }
}

element("grant-preview").addEventListener("click", preview);
element("grant-sign").addEventListener("click", sign);
