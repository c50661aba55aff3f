//! Which candidate a record serves, and how records of older versions read.

use super::*;

#[test]
fn the_default_is_served_unless_beaten_by_more_than_the_noise() {
    let r = record(&[Some(1.00), Some(0.99)], 1024, "H200");
    assert_eq!(r.winner().unwrap().0.kernel, "k1");
    assert_eq!(r.choice().unwrap().kernel, "k0", "1% is noise");
    // Before the finals a screening win must be clear: 5% is not, 12% is.
    let r = record(&[Some(1.00), Some(0.95)], 1024, "H200");
    assert_eq!(
        r.choice().unwrap().kernel,
        "k0",
        "screened 5% is not served"
    );
    assert_eq!(
        settle(r, &[Some(1.00), Some(0.95)])
            .choice()
            .unwrap()
            .kernel,
        "k1",
        "settled 5% is"
    );
    let r = record(&[Some(1.00), Some(0.88)], 1024, "H200");
    assert_eq!(r.choice().unwrap().kernel, "k1");
    // A default that failed is never served; nothing measured, nothing served.
    let r = record(&[None, Some(1.5)], 1024, "H200");
    assert_eq!(r.choice().unwrap().kernel, "k1");
    assert!(record(&[None], 1024, "H200").choice().is_none());
}

#[test]
fn several_passes_settle_at_their_mean_and_one_pass_is_stored_as_before() {
    let mut r = record(&[Some(1.0), Some(0.9)], 512, "H200");
    let c = &mut r.candidates[1];
    c.push_settled_pass(1.0);
    assert_eq!((c.settled_ms(), c.settled_passes()), (Some(1.0), vec![1.0]));
    let one = serde_json::to_string(&*c).unwrap();
    assert!(!one.contains("settled_passes"), "{one}");
    // A pass on a buffer set the kernel runs slow on counts for a third.
    c.push_settled_pass(1.3);
    assert_eq!(c.settled_ms(), Some(1.15), "two passes: their mean");
    c.push_settled_pass(0.98);
    assert!((c.settled_ms().unwrap() - 3.28 / 3.0).abs() < 1e-12);
    assert_eq!(c.settled_passes(), vec![1.0, 1.3, 0.98]);
    let text = serde_json::to_string(&*c).unwrap();
    assert_eq!(serde_json::from_str::<Candidate>(&text).unwrap(), *c);
    // A record that stored its passes' median ranks by their mean all the same.
    if let Outcome::Measured { settled_ms, .. } = &mut c.outcome {
        *settled_ms = Some(1.0);
    }
    assert!((c.settled_ms().unwrap() - 3.28 / 3.0).abs() < 1e-12);
    // Dropping the settled time drops the passes; a failed candidate takes none.
    c.set_settled_ms(None);
    assert!(c.settled_passes().is_empty());
    let mut failed = record(&[None], 512, "H200").candidates.remove(0);
    failed.push_settled_pass(1.0);
    assert_eq!(
        (failed.settled_ms(), failed.settled_passes()),
        (None, vec![])
    );
}

#[test]
fn once_the_finals_ran_only_settled_times_rank() {
    // Screening: k2 fastest. Settled: k2 slowest of the finalists, k3 (0.6 in
    // screening) not a finalist.
    let screened = record(&[Some(1.0), Some(0.9), Some(0.5), Some(0.6)], 1024, "H200");
    assert!(!screened.finals_done());
    assert_eq!(screened.winner().unwrap().0.kernel, "k2");
    let r = settle(screened, &[Some(0.95), Some(0.8), Some(1.2), None]);
    assert!(r.finals_done());
    assert_eq!(
        r.winner().map(|(c, ms)| (c.kernel.as_str(), ms)),
        Some(("k1", 0.8))
    );
    assert_eq!(r.default_ms(), Some(0.95));
    assert_eq!(r.ranking_ms(&r.candidates[3]), None, "no finalist, no rank");
    assert_eq!(r.choice().unwrap().kernel, "k1");
    // The default is compared settled too: within MIN_GAIN of it, it is served.
    let r = settle(
        record(&[Some(1.0), Some(0.5)], 1024, "H200"),
        &[Some(0.80), Some(0.79)],
    );
    assert_eq!(r.winner().unwrap().0.kernel, "k1");
    assert_eq!(r.choice().unwrap().kernel, "k0", "1% settled is noise");
    // ... unless the finals' passes ran on buffer sets of their own: then 1.5% is
    // served, 0.5% is not.
    let placed = |settled_ms: f64| {
        let mut r = settle(
            record(&[Some(1.0), Some(0.5)], 1024, "H200"),
            &[Some(0.80), Some(settled_ms)],
        );
        r.timing.final_placements = 3;
        r.choice().unwrap().kernel.clone()
    };
    assert_eq!(placed(0.80 / 1.015), "k1");
    assert_eq!(placed(0.80 / 1.005), "k0");
    // A default whose finals timing failed is not compared: the winner is served.
    let r = settle(
        record(&[Some(1.0), Some(1.1), Some(1.2)], 1024, "H200"),
        &[None, Some(1.0), Some(0.9)],
    );
    assert_eq!(r.default_ms(), None);
    assert_eq!(r.choice().unwrap().kernel, "k2");
}

#[test]
fn records_written_before_the_finals_parse_and_rank_by_screening_time() {
    let r = record(&[Some(2.0), Some(1.5), None], 4096, "H200");
    let mut json = serde_json::to_value(&r).unwrap();
    // What an older fa4-gen wrote: no finals fields anywhere.
    let timing = json["timing"].as_object_mut().unwrap();
    timing.remove("finalists").unwrap();
    timing.remove("settle_ms").unwrap();
    timing.remove("key_warmup_ms").unwrap();
    let text = json.to_string();
    assert!(
        !text.contains("settled_ms") && !text.contains("finalists"),
        "{text}"
    );
    let old: Record = serde_json::from_str(&text).unwrap();
    assert_eq!((old.timing.finalists, old.timing.settle_ms), (0, 0.0));
    assert!(!old.finals_done());
    assert_eq!(
        old.winner().map(|(c, ms)| (c.kernel.as_str(), ms)),
        Some(("k1", 1.5))
    );
    assert_eq!(old.choice().unwrap().kernel, "k1");
    assert_eq!(old, r);
    let outcome: Outcome = serde_json::from_str(
        r#"{"measured":{"ms":1.25,"spread":0.02,"tflops":300.0,"registers":240}}"#,
    )
    .unwrap();
    assert!(
        matches!(&outcome, Outcome::Measured { ms, settled_ms: None, code_hash, .. } if *ms == 1.25 && code_hash.is_empty())
    );
    // The timed kernel's code hash is written where known, and read back.
    let text = serde_json::to_string(&r).unwrap();
    assert_eq!(text.matches("\"code_hash\":\"c").count(), 2, "{text}");
    assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), r);
    let unknown = serde_json::to_string(&Outcome::Measured {
        ms: 1.0,
        spread: 0.0,
        tflops: 1.0,
        registers: 1,
        settled_ms: None,
        settled_passes: Vec::new(),
        code_hash: String::new(),
    })
    .unwrap();
    assert!(!unknown.contains("code_hash"), "{unknown}");
    // A settled time is written, and read back.
    let settled = settle(r, &[Some(1.9), Some(1.4), None]);
    let text = serde_json::to_string(&settled).unwrap();
    assert_eq!(text.matches("\"settled_ms\"").count(), 2, "{text}");
    assert_eq!(serde_json::from_str::<Record>(&text).unwrap(), settled);
}

#[test]
fn the_winner_is_the_fastest_measured_candidate() {
    let r = record(&[Some(2.0), None, Some(1.5)], 4096, "H200");
    assert_eq!(r.winner().unwrap().0.kernel, "k2");
    let failed = record(&[None, None], 4096, "H200");
    assert!(failed.winner().is_none(), "a failed candidate never wins");
}
