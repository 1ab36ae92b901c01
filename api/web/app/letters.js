// The letter board's rows for each language of the page: "qwerty" is the
// language's own keyboard (QWERTZ for German, AZERTY for French, ЙЦУКЕН for
// Ukrainian, the Arabic keyboard for Arabic), "abc" its alphabet in order.
// Rows list the keys in reading order: in a right-to-left language the
// first key of a row is drawn at the right. The apostrophe types "I'm",
// "l'eau" and "м'ясо". Letters with diacritics that the language's users
// can leave out (é, ą, й...) may be typed plain: replyd matches a plain
// letter to its marked forms (api/client.md, "Steering").

const LATIN_ABC = ['abcdefg', 'hijklmn', 'opqrstu', "vwxyz'"];

const BOARDS = {
  en: { qwerty: ['qwertyuiop', "asdfghjkl'", 'zxcvbnm'], abc: LATIN_ABC },
  de: { qwerty: ['qwertzuiopü', 'asdfghjklöä', "yxcvbnmß'"], abc: ['abcdefgh', 'ijklmnop', 'qrstuvwx', "yzäöüß'"] },
  fr: { qwerty: ['azertyuiop', 'qsdfghjklm', "wxcvbn'", 'éèêàçùôî'], abc: ['abcdefgh', 'ijklmnop', 'qrstuvwx', "yz'éèàçù"] },
  es: { qwerty: ['qwertyuiop', 'asdfghjklñ', 'zxcvbnm', 'áéíóúü'], abc: ['abcdefgh', 'ijklmnñ', 'opqrstu', 'vwxyz', 'áéíóúü'] },
  it: { qwerty: ['qwertyuiop', "asdfghjkl'", 'zxcvbnm', 'àèéìòù'], abc: ['abcdefg', 'hijklmn', 'opqrstu', "vwxyz'", 'àèéìòù'] },
  nl: { qwerty: ['qwertyuiop', "asdfghjkl'", 'zxcvbnm'], abc: LATIN_ABC },
  pt: { qwerty: ['qwertyuiop', 'asdfghjklç', 'zxcvbnm', 'áâãàéêíóôõú'], abc: ['abcdefgh', 'ijklmnop', 'qrstuvwx', 'yzçáâãà', 'éêíóôõú'] },
  pl: { qwerty: ['qwertyuiop', 'asdfghjkl', 'zxcvbnm', 'ąćęłńóśźż'], abc: ['aąbcćdeę', 'fghijklł', 'mnńoópqr', 'sśtuvwxy', 'zźż'] },
  sv: { qwerty: ['qwertyuiopå', 'asdfghjklöä', 'zxcvbnm'], abc: ['abcdefgh', 'ijklmnop', 'qrstuvwx', 'yzåäö'] },
  uk: { qwerty: ['йцукенгшщзхї', 'фівапролджє', "ґячсмитьбю'"], abc: ['абвгґдеєж', 'зиіїйклмн', 'опрстуфхц', "чшщьюя'"] },
  ar: { qwerty: ['ضصثقفغعهخحجد', 'شسيبلاتنمكط', 'ذئءؤرىةوزظ'], abc: ['ابتثجحخد', 'ذرزسشصضط', 'ظعغفقكلم', 'نهويءةىأ'] },
};

/** The board layouts of lang: [{id, rows}], its own keyboard first. */
export function layoutsFor(lang) {
  const b = BOARDS[lang] || BOARDS.en;
  return [{ id: 'qwerty', rows: b.qwerty }, { id: 'abc', rows: b.abc }];
}

/** The rows of layout id (qwerty or abc) in lang. */
export function rowsFor(lang, id) {
  const ls = layoutsFor(lang);
  return (ls.find((l) => l.id === id) || ls[0]).rows;
}

/** The letters of lang's boards, for tests and hardware keyboards. */
export function lettersOf(lang) {
  return new Set(layoutsFor(lang).flatMap((l) => [...l.rows.join('')]));
}

/** How a key shows letter ch: its capital where the capital is one
 * letter (ß stays ß), the letter itself in scripts without case. */
export function keyCap(ch, lang) {
  const up = ch.toLocaleUpperCase(lang);
  return [...up].length === 1 ? up : ch;
}
