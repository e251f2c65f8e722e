// Amounts typed by a person, in a currency's minor units: the exponent is the one the
// browser's Intl knows for the ISO 4217 code (USD 2, JPY 0, KWD 3), as the server's is.

/** "20.00" in minor units of ``currency`` (2000 for USD), null for "", or an Error naming
 * ``what`` for anything that is not an amount of that currency. */
export function minorUnits(text, currency, what) {
  const value = text.trim();
  if (value === "") {
    return null;
  }
  let digits;
  try {
    digits = new Intl.NumberFormat("en", { style: "currency", currency }).resolvedOptions()
      .maximumFractionDigits;
  } catch {
    throw new Error(`${currency} is not a currency`);
  }
  const match = /^(\d{1,15})(?:\.(\d+))?$/.exec(value);
  if (!match || (match[2] ?? "").length > digits) {
    throw new Error(`${what}: ${value} is not an amount of ${currency}`);
  }
  return Number(match[1]) * 10 ** digits + Number((match[2] ?? "").padEnd(digits, "0") || 0);
}
