//! Every answer fits a model's context: past its character budget, the longest list in it is
//! cut, and the answer says so and how to see the rest.

use serde_json::Value;

use crate::limits::{READ_FILE_DEFAULT_CHARS, READ_MAX_CHARS};

/// The budget of a call: its `max_chars` argument where the tool takes one (at most
/// [`READ_MAX_CHARS`]), else [`READ_FILE_DEFAULT_CHARS`].
pub(crate) fn of_request(args: &Value) -> usize {
    args.get("max_chars")
        .and_then(Value::as_u64)
        .map_or(READ_FILE_DEFAULT_CHARS, |n| {
            (n as usize).clamp(READ_FILE_DEFAULT_CHARS, READ_MAX_CHARS)
        })
}

/// Cuts the longest top-level list of `answer` until the whole fits in `budget` characters
/// (as JSON), and marks it: `truncated`, and a note naming how much was kept. An answer whose
/// size is in one text (a file's content) is bounded by its tool, not here.
pub(crate) fn bound(answer: &mut Value, budget: usize, takes_max_chars: bool) {
    let whole = answer.to_string().len();
    if whole <= budget {
        return;
    }
    let Value::Object(fields) = answer else {
        return;
    };
    let longest = fields
        .iter()
        .filter_map(|(k, v)| {
            v.as_array()
                .map(|a| (k.clone(), Value::Array(a.clone()).to_string().len()))
        })
        .max_by_key(|(_, len)| *len);
    let Some((field, list_len)) = longest else {
        return;
    };
    let Some(Value::Array(items)) = fields.get_mut(&field) else {
        return;
    };
    // Room for the note added below.
    let room = budget.saturating_sub(whole - list_len).saturating_sub(400);
    let total = items.len();
    let mut used = 2;
    let kept = items
        .iter()
        .take_while(|item| {
            used += item.to_string().len() + 1;
            used <= room
        })
        .count();
    if kept == total {
        return;
    }
    items.truncate(kept);
    let more = if takes_max_chars {
        format!(" or raise max_chars (at most {READ_MAX_CHARS})")
    } else {
        String::new()
    };
    let note = format!(
        "The answer was cut to about {budget} characters: {kept} of the {total} {field} are shown. To see the rest, narrow the call (a folder or file, include or exclude globs, fewer context lines){more}."
    );
    fields.insert("truncated".into(), Value::Bool(true));
    match fields.get_mut("notes") {
        Some(Value::Array(notes)) => notes.push(Value::String(note)),
        _ => {
            let joined = match fields.get("note").and_then(Value::as_str) {
                Some(earlier) => format!("{earlier} {note}"),
                None => note,
            };
            fields.insert("note".into(), Value::String(joined));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_long_list_is_cut_to_the_budget_and_says_so() {
        let items: Vec<Value> = (0..1000)
            .map(|i| json!({"path": format!("file-{i}.md"), "line": i, "text": "x".repeat(80)}))
            .collect();
        let mut answer = json!({"ok": true, "results": items, "truncated": false});
        bound(&mut answer, 20_000, false);
        assert!(answer.to_string().len() <= 20_000);
        assert_eq!(answer["truncated"], true);
        let kept = answer["results"].as_array().unwrap().len();
        assert!(kept > 100, "{kept}");
        let note = answer["note"].as_str().unwrap();
        assert!(
            note.contains(&format!("{kept} of the 1000 results")),
            "{note}"
        );
        assert!(!note.contains("max_chars"));

        // Within the budget: untouched.
        let mut small = json!({"ok": true, "results": [1, 2, 3]});
        let before = small.clone();
        bound(&mut small, 20_000, true);
        assert_eq!(small, before);
    }

    #[test]
    fn the_budget_is_the_calls_max_chars_within_bounds() {
        assert_eq!(of_request(&json!({})), READ_FILE_DEFAULT_CHARS);
        assert_eq!(of_request(&json!({"max_chars": 50_000})), 50_000);
        assert_eq!(
            of_request(&json!({"max_chars": 10})),
            READ_FILE_DEFAULT_CHARS
        );
        assert_eq!(
            of_request(&json!({"max_chars": 10_000_000})),
            READ_MAX_CHARS
        );
    }
}
